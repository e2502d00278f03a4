"""The `taso-tvm` command line (tvmc-style; tvmc left TVM together with Relay)."""
from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from typing import Callable, Optional, Sequence

log = logging.getLogger("taso_tvm")


from .cli_model import CheckFailed, CLIError, add_model_commands


def _load_model(path: str, input_shapes: Optional[str]):
    from .onnx_io import load_onnx, parse_shapes

    return load_onnx(path, shapes=parse_shapes(input_shapes) if input_shapes else None)


def cmd_zoo(args: argparse.Namespace) -> int:
    from . import zoo

    if args.zoo_cmd == "list":
        for name in zoo.list_models():
            print(f"{name:14s} {zoo.MODELS[name].description}")
        return 0
    kwargs = {"layers": args.layers} if args.layers is not None else {}
    try:
        model = zoo.get_model(args.name, seed=args.seed, **kwargs)
    except (ValueError, TypeError) as e:
        raise CLIError(str(e)) from None
    import onnx

    onnx.save(model, args.output)
    print(f"wrote {args.output} ({args.name}: {len(model.graph.node)} nodes)")
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    """Import a model, lift its dataflow blocks, and summarise the TensorGraph(s)."""
    from .relay_pass.lift import lift_function
    from tvm import relax

    mod = _load_model(args.model, args.input_shapes)
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        for i, block in enumerate(lift_function(func)):
            g = block.graph
            counts = Counter(n.op for n in g.ops())
            print(f"{gv.name_hint} block {i}: {g.num_ops} operators ({block.num_opaque} opaque), "
                  f"{len(g.inputs())} inputs, {len(g.outputs)} outputs")
            for op, n in counts.most_common():
                print(f"  {op:12s} {n}")
            if args.verbose:
                print(g)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="taso-tvm", description="TASO graph superoptimizer for Apache TVM Relax")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress and details")
    sub = p.add_subparsers(dest="cmd", required=True)

    z = sub.add_parser("zoo", help="the built-in models of TASO's evaluation")
    zs = z.add_subparsers(dest="zoo_cmd", required=True)
    zs.add_parser("list", help="list the zoo models")
    ze = zs.add_parser("export", help="write a zoo model as ONNX")
    ze.add_argument("name")
    ze.add_argument("-o", "--output", required=True)
    ze.add_argument("--seed", type=int, default=0)
    ze.add_argument("--layers", type=int, help="encoder layers (bert)")
    z.set_defaults(func=cmd_zoo)

    g = sub.add_parser("graph", help="import a model and summarise the lifted TensorGraph")
    g.add_argument("model")
    g.add_argument("--input-shapes", help='fix input shapes: "name:[1,3,224,224],mask:[1,128]"')
    g.set_defaults(func=cmd_graph)
    add_model_commands(sub)
    for name, (module, text) in DELEGATED.items():  # listed in the help; main() hands them their arguments
        d = sub.add_parser(name, help=text, add_help=False)
        d.add_argument("rest", nargs=argparse.REMAINDER)
        d.set_defaults(func=lambda a, name=name, module=module: _delegate(module, [name] + a.rest))
    return p


DELEGATED = {"cost": ("taso_tvm.cost.cli", "cost of each kernel of a model and the total (TASO's cost())"),
             "rules": ("taso_tvm.rules.cli", "verify and list the rewrite rules (Z3 proofs, cached)")}


def _delegate(module: str, argv: list) -> int:
    """Run a sub-tool's own command line (cost, rules), which parses its arguments itself."""
    import importlib

    return int(importlib.import_module(module).main(argv) or 0)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:  # sub-tools with their own command lines
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        return _delegate(DELEGATED[argv[0]][0], argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from .graph import GraphError
    from .onnx_io import ModelLoadError

    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (CLIError, ModelLoadError, GraphError) as e:
        print(f"taso-tvm: error: {e}", file=sys.stderr)
        return 2
    except CheckFailed as e:
        print(f"taso-tvm: check failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("taso-tvm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
