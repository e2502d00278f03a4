"""The `taso-tvm` command line (tvmc-style; tvmc left TVM together with Relay)."""
from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import warnings
from collections import Counter
from typing import Any, Callable, Iterator, Optional, Sequence

from .model import add_model_commands
from .argtypes import OneLineParser, nonneg_int, positive_int
from .common import CLIError

log = logging.getLogger("taso_tvm")


def _load_model(path: str, input_shapes: Optional[str]):
    from ..onnx_io import load_onnx, parse_shapes

    return load_onnx(path, shapes=parse_shapes(input_shapes) if input_shapes else None)


def cmd_zoo(args: argparse.Namespace) -> int:
    from .. import zoo

    if args.zoo_cmd == "list":
        for name in zoo.list_models():
            print(f"{name:14s} {zoo.MODELS[name].description}")
        return 0
    kwargs = {"layers": args.layers} if args.layers is not None else {}
    try:
        model = zoo.get_model(args.name, seed=args.seed, **kwargs)
    except (ValueError, TypeError) as e:
        raise CLIError(str(e)) from None
    from ..fileio import atomic_write_bytes

    _check_writable(args.output)
    atomic_write_bytes(args.output, model.SerializeToString())
    print(f"wrote {args.output} ({args.name}: {len(model.graph.node)} nodes)")
    return 0


def _check_writable(path: str) -> None:
    from ..fileio import writable_target

    why = writable_target(path)
    if why:
        raise CLIError(why)


def cmd_graph(args: argparse.Namespace) -> int:
    """Import a model, lift its dataflow blocks, and summarise the TensorGraph(s)."""
    from ..relay_pass.lift import lift_function
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
    p = OneLineParser(prog="taso-tvm", description="TASO graph superoptimizer for Apache TVM Relax")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress and details")
    sub = p.add_subparsers(dest="cmd", required=True)

    z = sub.add_parser("zoo", help="the built-in models of TASO's evaluation")
    zs = z.add_subparsers(dest="zoo_cmd", required=True)
    zs.add_parser("list", help="list the zoo models")
    ze = zs.add_parser("export", help="write a zoo model as ONNX")
    ze.add_argument("name")
    ze.add_argument("-o", "--output", required=True)
    ze.add_argument("--seed", type=nonneg_int, default=0)
    ze.add_argument("--layers", type=positive_int, help="encoder layers (bert)")
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


DELEGATED = {"bench": ("taso_tvm.cli.bench", "time a model as users run it, original against taso-tvm, side by side"),
             "cost": ("taso_tvm.cli.cost", "cost of each kernel of a model and the total (TASO's cost())"),
             "rules": ("taso_tvm.cli.rules", "verify, list and generate the rewrite rules (Z3 proofs, cached)")}


def _delegate(module: str, argv: list) -> int:
    """Run a sub-tool's own command line (cost, rules), which parses its arguments itself."""
    import importlib

    return int(importlib.import_module(module).main(argv) or 0)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command; the one place that turns exceptions into a one-line message and an exit status:
    0 done, 1 the check refused the result, 2 bad input or settings, 130 interrupted, 3 a bug (its traceback
    goes to a crash file, not the screen)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = any(a in ("-v", "--verbose") for a in argv)
    from ..quiet import native_stderr_off

    root = logging.getLogger()
    handlers = list(root.handlers)
    with native_stderr_off(not verbose), _first_interrupt_raises_second_exits() as pressed:
        try:
            with _quiet_warnings(not verbose):
                return _run(argv)
        except SystemExit:  # argparse's usage errors (exit 2) and --help (exit 0)
            raise
        except BaseException as e:  # noqa: BLE001  (this is the one place that reports every error)
            from ..errors import TasoError

            # after a Ctrl-C, what a library made of it (TVM: an empty RuntimeError) is the interrupt, not a bug
            return report_error(KeyboardInterrupt() if pressed and not isinstance(e, TasoError) else e, argv)
        finally:
            for h in root.handlers[:]:  # the handler made for this run writes to this run's stderr
                if h not in handlers:
                    root.removeHandler(h)


def _run(argv: list) -> int:
    if argv and argv[0] in DELEGATED:  # sub-tools with their own command lines
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        return _delegate(DELEGATED[argv[0]][0], argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


def report_error(err: BaseException, argv: Sequence[str] = ()) -> int:
    """Print one line for `err` on stderr and return its exit status (see `main`)."""
    from ..errors import EXIT_BUG, EXIT_CHECK, EXIT_INTERRUPTED, exit_code, one_line

    code = exit_code(err)
    if isinstance(err, BrokenPipeError):  # `taso-tvm zoo list | head -1`: the reader left, nothing to say
        import os

        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 141
    if code == EXIT_BUG and isinstance(err, OSError) and err.filename:  # disk full, permissions: not a bug
        print(f"taso-tvm: error: cannot access '{err.filename}': {err.strerror or one_line(err)}", file=sys.stderr)
        return 2
    if code == EXIT_INTERRUPTED:
        print("taso-tvm: interrupted", file=sys.stderr)
    elif code == EXIT_CHECK:
        print(f"taso-tvm: check failed: {one_line(err)}", file=sys.stderr)
    elif code == EXIT_BUG:
        where = _save_crash(err, argv)
        print(f"taso-tvm: internal error ({type(err).__name__}: {one_line(err)[:200]}); this is a bug, please "
              f"report it with {where}", file=sys.stderr)
    else:
        print(f"taso-tvm: error: {one_line(err)}", file=sys.stderr)
    return code


CRASH_DIR_ENV = "TASO_TVM_CRASH_DIR"


def _save_crash(err: BaseException, argv: Sequence[str]) -> str:
    """Write the traceback to crash-<time>-<pid>.txt under $TASO_TVM_CRASH_DIR, ~/.cache/taso_tvm or a private
    folder made by `tempfile.mkdtemp` (the first that can be written); returns its path (or a note that none
    could be)."""
    import os
    import platform
    import tempfile
    import time
    import traceback

    text = (f"taso-tvm {' '.join(argv)}\npython {platform.python_version()} on {platform.platform()}\n\n"
            + "".join(traceback.format_exception(type(err), err, err.__traceback__)))
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{time.time_ns() % 10**9:09d}.txt"
    private = object()  # the last resort: a folder of our own in the temp dir, never a guessable name there
    for folder in (os.environ.get(CRASH_DIR_ENV), os.path.expanduser("~/.cache/taso_tvm"), private):
        if not folder:
            continue
        try:
            from ..fileio import atomic_write_text

            folder = tempfile.mkdtemp(prefix="taso_tvm_crash_") if folder is private else folder
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, name)
            atomic_write_text(path, text)
            return path
        except OSError:
            continue
    return "the command line (no crash file could be written)"


@contextlib.contextmanager
def _first_interrupt_raises_second_exits() -> Iterator[list]:
    """Ctrl-C raises KeyboardInterrupt once (so workers stop and temporary files go); a second one, while that
    cleanup runs, exits at once with status 130. Yields the list of presses so far."""
    import os
    import signal
    import threading

    pressed: list = []
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return

    def on_sigint(signum: int, frame: Any) -> None:
        pressed.append(signum)
        ffi = sys.modules.get("tvm_ffi")
        if ffi is not None:  # let the KeyboardInterrupt cross TVM's FFI as itself
            ffi.register_error(KeyboardInterrupt)
        if len(pressed) > 1:
            import multiprocessing

            from ..fileio import remove_pending

            remove_pending()
            for child in multiprocessing.active_children():  # workers (they ignore Ctrl-C) go with us
                child.kill()
            try:
                sys.stderr.write("taso-tvm: interrupted\n")
                sys.stderr.flush()
            finally:
                os._exit(130)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread of the main interpreter
        yield pressed
        return
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _quiet_warnings(enabled: bool) -> Iterator[None]:
    """Without --verbose, Python and NumPy warnings from the libraries stay off the screen (ours are log lines)."""
    if not enabled:
        yield
        return
    import numpy as np

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield

