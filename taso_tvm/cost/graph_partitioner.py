"""TVM's operator-fusion partitioner (`relax/analysis/graph_partitioner.cc`, as FuseOps runs it), in Python.

Input: a forward dataflow graph in topological order with an OpPatternKind per node and per edge (the consumer's
pattern, as Relax's FuseOps sets it). Output: each node's group root. The post-dominator tree, the three fusion
phases, CheckPath/CommitFuse and the union-find group patterns follow the C++ code step by step, so groupings
(including tie-breaks by binding order) agree with TVM's.
"""
from __future__ import annotations

from .patterns import BROADCAST, COMM_REDUCE, ELEMWISE, INJECTIVE, OPAQUE, OUT_EWISE_FUSABLE, TUPLE

MAX_FUSE_DEPTH = 256  # relax.FuseOps.max_depth default (kMaxFusedOps)


def find_root(parent, i: int) -> int:
    """Union-find root of `i` in `parent` (a list or a dict), compressing the path."""
    r = i
    while parent[r] != r:
        r = parent[r]
    while parent[i] != r:
        parent[i], i = r, parent[i]
    return r


def fuse(pats: list[int], outs: list[list], extern: list[bool], max_depth: int = MAX_FUSE_DEPTH) -> list[int]:
    """TVM's GraphPartitioner on a forward graph given in topological order; returns each node's group root.

    `pats[i]` is node i's pattern, `outs[i]` its (consumer, edge pattern) list, `extern[i]` whether its value is
    used outside the dataflow block.
    """
    n = len(pats)
    # ---- post-dominator tree (reverse topological order; LCA of the consumers)
    dparent = [-1] * n
    depth = [1] * n
    dpat = [ELEMWISE] * n
    for i in range(n - 1, -1, -1):
        if extern[i]:
            dpat[i] = OPAQUE
            continue
        links = outs[i]
        if not links:
            continue
        par, p = links[0]
        for c, ep in links[1:]:
            lhs, rhs = par, c
            while lhs != rhs:
                if lhs < 0 or rhs < 0:
                    lhs = -1
                    break
                dl, dr = depth[lhs], depth[rhs]
                if dl < dr:
                    if dpat[rhs] > p:
                        p = dpat[rhs]
                    rhs = dparent[rhs]
                elif dr < dl:
                    if dpat[lhs] > p:
                        p = dpat[lhs]
                    lhs = dparent[lhs]
                else:
                    p = max(p, dpat[lhs], dpat[rhs])
                    lhs = dparent[lhs]
                    rhs = dparent[rhs]
            par = lhs
            if ep > p:
                p = ep
        dparent[i] = par
        depth[i] = depth[par] + 1 if par >= 0 else 1
        dpat[i] = p

    # ---- union-find groups
    gparent = list(range(n))
    gpat = list(pats)
    anchor = [p == OUT_EWISE_FUSABLE for p in pats]
    num = [1] * n

    def find(i: int) -> int:
        return find_root(gparent, i)

    def check_path(src: int, sink: int, limit: int, sink_limit: int) -> bool:
        """Every group between src and sink has pattern <= limit, the sink's group <= sink_limit."""
        links = outs[src]
        if len(links) == 1 and links[0][0] == sink:
            return gpat[find(sink)] <= sink_limit
        visited = set()
        stack = [c for c, _ in links]
        while stack:
            v = stack.pop()
            if v in visited:
                continue
            visited.add(v)
            if v == sink:
                if gpat[find(v)] > sink_limit:
                    return False
                continue
            if gpat[find(v)] > limit:
                return False
            stack.extend([c for c, _ in outs[v]])
        return True

    def between(src: int, sink: int):
        """The nodes on the paths from src to sink, src included, sink not, each once."""
        visited = set()
        stack = [src]
        while stack:
            v = stack.pop()
            if v == sink or v in visited:
                continue
            visited.add(v)
            yield v
            stack.extend([c for c, _ in outs[v]])

    def commit(src: int, sink: int) -> None:
        target = find(sink)
        for v in between(src, sink):
            c = find(v)
            if c != target:
                num[target] += num[c]
                gparent[c] = target
                if anchor[c]:
                    anchor[target] = True
                    if gpat[c] > gpat[target]:
                        gpat[target] = gpat[c]

    def too_deep(child: int, dom: int) -> bool:
        # cheap exact test first: the nodes between child and dom lie in index range [child, dom)
        if num[find(dom)] + sum(num[child:dom]) <= max_depth:
            return False
        return num[find(dom)] + sum(num[v] for v in between(child, dom)) > max_depth

    for phase in range(3):
        for i in range(n):
            gp = gpat[i]
            dom = dparent[i]
            if gp == OPAQUE or dom < 0:
                continue
            if phase == 2:
                if gp > INJECTIVE or gpat[dom] != TUPLE:
                    continue  # (no tuple nodes arise from TensorGraphs; kept for fidelity)
                droot = find(dom)
                if gpat[droot] <= INJECTIVE and gpat[droot] != TUPLE and not too_deep(i, dom) \
                        and check_path(i, dom, INJECTIVE, INJECTIVE):
                    commit(i, dom)
                continue
            if gpat[dom] == TUPLE or find(i) == find(dom):
                continue
            if gp == OUT_EWISE_FUSABLE:
                if phase == 0 and dpat[i] == ELEMWISE and not too_deep(i, dom) \
                        and check_path(i, dom, BROADCAST, BROADCAST):
                    commit(i, dom)
            elif gp <= BROADCAST:
                if (dpat[i] <= INJECTIVE or dpat[i] == COMM_REDUCE) and not too_deep(i, dom) \
                        and check_path(i, dom, INJECTIVE, OUT_EWISE_FUSABLE):
                    commit(i, dom)
            elif gp == INJECTIVE or gp == TUPLE:
                if phase == 1 and not too_deep(i, dom) and check_path(i, dom, INJECTIVE, INJECTIVE):
                    commit(i, dom)
    return [find(i) for i in range(n)]
