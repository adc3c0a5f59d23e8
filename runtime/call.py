"""`python -m hpcplace.runtime.call CALL.pkl RESULTS_DIR`: one rank of a Python-function component.

Started by the shim (so RANK, WORLD_SIZE, CUDA_VISIBLE_DEVICES, ... are set and
`hpcplace.runtime.process_info()` works inside the function). Loads the call pickled by
hpcplace.functions with submitit's `DelayedSubmission.load`, runs it, and writes a record to
RESULTS_DIR/<stem of CALL.pkl>.<rank>.pkl atomically (temporary file + rename):
`{"ok": True, "value": ...}` or `{"ok": False, "traceback": "...", ...}`. A raising function exits
non-zero (1, or its SystemExit code), so the step fails and the job stops fast.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback

from hpcplace.runtime.errors import ShimError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

PROG = "python -m hpcplace.runtime.call"


def _rank(environ: Mapping[str, str]) -> str:
    rank = environ.get("HPCPLACE_RANK", "")
    if not rank.isdigit():
        raise ShimError(
            "HPCPLACE_RANK is not set: this program runs one rank of a function component",
            hint="start it through hpcplace-run (hpcplace.functions.submit_functions does)",
        )
    return rank


def _write(record: dict[str, object], target: str) -> None:
    """cloudpickle the record to a temporary file beside `target`, then rename it into place."""
    from submitit.core.utils import cloudpickle_dump

    tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}.tmp")
    try:
        cloudpickle_dump(record, tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _user_traceback(exc: BaseException) -> str:
    """The formatted traceback without the leading frames of this module and submitit's caller."""
    ours = {os.path.abspath(__file__)}
    submitit_utils = sys.modules.get("submitit.core.utils")
    if submitit_utils is not None and submitit_utils.__file__:
        ours.add(os.path.abspath(submitit_utils.__file__))
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in ours:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) != 2:
            raise ShimError(f"expected 2 arguments, got {len(args)}", hint=f"usage: {PROG} CALL.pkl RESULTS_DIR")
        call_path, results_dir = args
        stem = os.path.basename(call_path).removesuffix(".pkl")
        target = os.path.join(results_dir, f"{stem}.{_rank(os.environ)}.pkl")
    except ShimError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return exc.exit_code
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    code = 0
    try:
        from submitit.core.utils import DelayedSubmission

        record: dict[str, object] = {"ok": True, "value": DelayedSubmission.load(call_path).result()}
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a record the caller can read
        text = _user_traceback(exc)
        record = {"ok": False, "traceback": text, "error": f"{type(exc).__name__}: {exc}", "host": host}
        sys.stderr.write(text)
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code else 1
    try:
        _write(record, target)
    except Exception as exc:  # noqa: BLE001 - e.g. a return value cloudpickle cannot pickle
        text = f"{traceback.format_exc()}\nthe result of this rank could not be saved: {type(exc).__name__}: {exc}\n"
        sys.stderr.write(text)
        try:
            _write({"ok": False, "traceback": text, "error": f"{type(exc).__name__}: {exc}", "host": host}, target)
        except Exception:  # noqa: BLE001 - the results directory itself is unusable; the exit code says it
            pass
        code = code or 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
