#!/usr/bin/env python3
"""Plan every framework command of checkouts of the command-format frameworks (verl, NeMo-RL, OpenRLHF, slime),
as a user running the frameworks' own example scripts would: each `*.sh` is run by bash to get its commands exactly
as bash expands them, WITHOUT running the framework, then each recorded command is planned with
`hpcplace plan SITE --driver -- COMMAND` (SITE: a file with only a `slurm:` block; a verl checkout's own
`ppo_trainer.yaml` is composed, through HPCPLACE_VERL_SRC). Prints, per checkout, how many
commands planned, how many were refused (grouped by the error, with whether it is located) and how many produced a
traceback (there must be none). scripts/upstream_sweep.py does the same for the YAML frameworks.

    python scripts/command_sweep.py [--site SITE.yaml] [--timeout S] [--jobs N] CHECKOUT... [-- PLAN_ARGS...]

e.g. `git --git-dir=/work/.mirror/verl-project+verl/repo archive 1dda039 | tar -x -C "$TMPDIR/verl"`, then
`python scripts/command_sweep.py "$TMPDIR/verl" "$TMPDIR/slime"`. Exit status 1 when any command produced a
traceback.

How a script runs: from the checkout's root (`bash path/to/run.sh`, no arguments), with a folder of stub
executables first on PATH. `python`, `python3`, `torchrun`, `deepspeed`, `ray`, `uv` record their argv and working
directory and exit 0; `pip`, `wget`, `curl`, `git`, `huggingface-cli`, `hf`, `docker`, `srun`, `sbatch`, `ssh`,
`sleep`, ... exit 0 doing nothing; `nvidia-smi` lists 8 GPUs. Each script runs in a sandbox (`unshare`: its own
user, mount and network namespaces): no network, every file system read-only except a scratch folder under
$TMPDIR, and the checkout seen through an overlay whose writes land in that scratch folder, with HOME and TMPDIR
there too; killed after --timeout seconds. Without `unshare` (or with --no-sandbox) the sweep refuses to run
scripts unless told so."""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from hpcplace.config.formats.entry_point import program_index

RECORDED = ("python", "python3", "python3.10", "python3.11", "python3.12", "torchrun", "deepspeed", "ray", "uv")
SILENT = (
    "pip", "pip3", "wget", "curl", "git", "git-lfs", "huggingface-cli", "hf", "modelscope", "docker", "apt",
    "apt-get", "sudo", "srun", "sbatch", "salloc", "scontrol", "squeue", "scancel", "ssh", "scp", "rsync", "sleep",
    "pkill", "killall", "wandb", "aws", "gsutil", "az", "nohup", "conda", "mpirun", "pdsh",
)  # fmt: skip
SITE = "slurm: {partition: a800, gpus_per_node: 8}\n"
RECORDER = """#!{python} -I
import json, os, sys
with open(os.environ["SWEEP_RECORD"], "a", encoding="utf-8") as out:
    out.write(json.dumps({{"argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]], "cwd": os.getcwd()}}) + "\\n")
"""
NVIDIA_SMI = '#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA A800 (UUID: GPU-$i)"; done\n'
# inside the namespaces: the scratch folder stays writable, the checkout is an overlay, the rest is read-only
SANDBOX = r"""set -u
scratch=$1 checkout=$2 root=$3; shift 3
mount --bind "$scratch" "$scratch" || exit 97
mount -t overlay overlay -o "lowerdir=$checkout,upperdir=$scratch/upper,workdir=$scratch/work" "$root" || exit 97
for m in $(awk '{print $2}' /proc/self/mounts | sort -u); do
  case "$m" in "$scratch"|"$scratch"/*) ;; *) mount -o remount,bind,ro "$m" 2>/dev/null ;; esac
done
cd "$root" && exec "$@"
"""


@dataclass(frozen=True)
class Recorded:
    """One command a script ran: its words as bash passed them, and the folder it ran in (in the checkout)."""

    argv: tuple[str, ...]
    cwd: Path


@dataclass(frozen=True)
class ScriptRun:
    """A script's run: its recorded commands, and how it ended ("ok", "exit N", "timeout")."""

    script: Path
    commands: tuple[Recorded, ...]
    ended: str


def sandbox_available() -> bool:
    """Whether this machine lets an unprivileged user make the sandbox's namespaces and overlay."""
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rnm", "true"], capture_output=True, check=False).returncode == 0


def write_stubs(folder: Path) -> None:
    """The stub executables (RECORDED record their argv, SILENT do nothing, nvidia-smi lists 8 GPUs)."""
    folder.mkdir(parents=True, exist_ok=True)
    recorder = RECORDER.format(python=sys.executable)
    for name, text in [
        *((n, recorder) for n in RECORDED),
        *((n, "#!/bin/sh\nexit 0\n") for n in SILENT),
        ("nvidia-smi", NVIDIA_SMI),
    ]:
        path = folder / name
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)


def run_script(script: Path, checkout: Path, scratch: Path, *, timeout: float, sandbox: bool = True) -> ScriptRun:
    """Run `script` (inside `checkout`) with bash, the stubs first on PATH, and return what it ran."""
    checkout = checkout.resolve()
    scratch.mkdir(parents=True)
    for sub in ("upper", "work", "root", "home", "tmp"):
        (scratch / sub).mkdir()
    write_stubs(scratch / "stubs")
    record = scratch / "record.jsonl"
    record.touch()
    root = scratch / "root" if sandbox else checkout
    env = {
        "PATH": f"{scratch / 'stubs'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(scratch / "home"),
        "TMPDIR": str(scratch / "tmp"),
        "SWEEP_RECORD": str(record),
        "LANG": "C.UTF-8",
    }
    command = ["bash", str(script.resolve().relative_to(checkout))]
    if sandbox:
        command = [
            "unshare",
            "-rnm",
            "bash",
            "-c",
            SANDBOX,
            "sandbox",
            str(scratch),
            str(checkout),
            str(root),
            *command,
        ]
    try:  # its own session: on timeout the whole process group goes (the script's children too)
        process = subprocess.Popen(
            command,
            cwd=scratch if sandbox else root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        return ScriptRun(script, (), f"not run: {exc}")
    try:
        code = process.wait(timeout)
        ended = "ok" if code == 0 else f"exit {code}"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        ended = "timeout"
    commands = []
    for line in record.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        cwd = Path(item["cwd"])
        argv = tuple(item["argv"])
        if sandbox:  # the overlay's paths (the cwd, `$(realpath ...)` in words) -> the same files of the checkout
            cwd = checkout / cwd.relative_to(root) if cwd.is_relative_to(root) else cwd
            argv = tuple(word.replace(str(root), str(checkout)) for word in argv)
        commands.append(Recorded(argv, cwd))
    return ScriptRun(script, tuple(commands), ended)


def is_framework_command(argv: Sequence[str]) -> bool:
    """A recorded command that starts a program (not `python -c`, `pip`, `ray start`, `uv sync`, ...)."""
    name, rest = argv[0], list(argv[1:])
    if name in ("torchrun", "deepspeed"):
        return bool(rest)
    if name == "ray":
        return rest[:2] == ["job", "submit"] and "--" in rest
    if name == "uv":  # `uv run [OPTIONS] PROGRAM ...`, but not a shell it runs (its script is swept on its own)
        program = argv[program_index(argv) :]
        if rest[:1] != ["run"] or not program or program[0] in ("bash", "sh"):
            return False
        return program[0] not in RECORDED or is_framework_command(program)  # `uv run python -c ...`: not one
    words = [w for w in rest if w not in ("-u", "-B", "-O")]
    return bool(words) and words[0] not in ("-c", "-", "--version", "-V") and words[:2] != ["-m", "pip"]


@dataclass(frozen=True)
class Outcome:
    """One command planned: "planned", "refused" (with the error's reason, folded) or "traceback"."""

    kind: str
    reason: str = ""
    located: bool = False


_ERROR = re.compile(r"^hpcplace: error: (?:(\S+?):(\d+):(\d+): )?(.*)$")


# a checkout whose own config files hpcplace reads when told where it is: (a folder it has, the variable naming it)
SOURCE_ENV = ((Path("verl") / "trainer" / "config", "HPCPLACE_VERL_SRC"),)


def checkout_env(checkout: Path) -> dict[str, str]:
    """The variables that make hpcplace read the checkout's own configs (verl's ppo_trainer.yaml) rather than
    those of the framework installed where it runs."""
    return {var: str(checkout.resolve()) for folder, var in SOURCE_ENV if (checkout / folder).is_dir()}


def plan_command(
    hpcplace: str,
    site: Path,
    checkout: Path,
    recorded: Recorded,
    plan_args: Sequence[str],
    timeout: float,
    env: dict[str, str],
) -> Outcome:
    """`hpcplace plan SITE PLAN_ARGS --driver -- COMMAND` in the folder the command ran in."""
    cwd = recorded.cwd if recorded.cwd.is_dir() else site.parent
    try:
        done = subprocess.run(
            [hpcplace, "plan", str(site), *plan_args, "--driver", "--", *recorded.argv],
            cwd=cwd,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Outcome("traceback", f"no answer in {timeout:.0f} s")
    if "Traceback" in done.stderr:
        return Outcome("traceback", done.stderr.strip().splitlines()[-1][:200])
    if done.returncode == 0:
        return Outcome("planned")
    line = next((m for m in map(_ERROR.match, done.stderr.splitlines()) if m), None)
    if line is None:
        return Outcome("traceback", f"exit {done.returncode} without an error line")
    # its first sentence, paths and numbers folded (a quoted word, e.g. the entry point, kept but its numbers)
    text = line.group(4).replace(f"{checkout}/", "")  # a path in the checkout as the checkout's own
    reason = re.sub(r"'[^'\s]+'|\S*/\S+", lambda m: m.group() if m.group()[0] == "'" else "#", text)
    reason = re.sub(r"\d+", "#", reason.split(". ", 1)[0])[:160]
    return Outcome("refused", reason, line.group(1) is not None)


def sweep(
    checkout: Path, work: Path, site: Path, plan_args: Sequence[str], *, timeout: float, jobs: int, sandbox: bool
) -> tuple[list[ScriptRun], list[tuple[Recorded, Outcome]]]:
    """Every script of `checkout` run, and every framework command it recorded planned."""
    hpcplace = shutil.which("hpcplace") or str(Path(sys.executable).with_name("hpcplace"))
    scripts = sorted(p for p in checkout.rglob("*.sh") if p.is_file() and ".git" not in p.parts)
    with ThreadPoolExecutor(jobs) as pool:
        runs = list(
            pool.map(
                lambda n: run_script(scripts[n], checkout, work / f"s{n}", timeout=timeout, sandbox=sandbox),
                range(len(scripts)),
            )
        )
    commands = [c for r in runs for c in r.commands if is_framework_command(c.argv)]
    with ThreadPoolExecutor(jobs) as pool:
        env = checkout_env(checkout)
        outcomes = list(
            pool.map(lambda c: plan_command(hpcplace, site, checkout.resolve(), c, plan_args, 300.0, env), commands)
        )
    return runs, list(zip(commands, outcomes, strict=True))


def report(name: str, runs: list[ScriptRun], planned: list[tuple[Recorded, Outcome]]) -> list[str]:
    """The counts of one checkout, as Markdown lines."""
    ended = collections.Counter(r.ended if r.ended in ("ok", "timeout") else "exit != 0" for r in runs)
    kinds = collections.Counter(o.kind for _, o in planned)
    lines = [
        f"### {name}",
        "",
        f"{len(runs)} scripts run ({', '.join(f'{n} {k}' for k, n in sorted(ended.items()))}), "
        f"{sum(len(r.commands) for r in runs)} commands recorded, {len(planned)} of them framework commands: "
        f"**{kinds['planned']} planned, {kinds['refused']} refused, {kinds['traceback']} tracebacks**.",
        "",
    ]
    refusals = collections.Counter((o.reason, o.located) for _, o in planned if o.kind == "refused")
    if refusals:
        lines += ["| refused | located | reason |", "|---:|---|---|"]
        lines += [
            f"| {n} | {'yes' if located else 'no'} | {reason.replace('|', '/')} |"
            for (reason, located), n in sorted(refusals.items(), key=lambda item: -item[1])
        ]
        lines.append("")
    for recorded, outcome in planned:
        if outcome.kind == "traceback":
            lines.append(f"- TRACEBACK: `{shlex.join(recorded.argv)[:160]}`: {outcome.reason}")
    return lines


# Where each framework's checkout declares its version (the release its rules are read by): OpenRLHF's setup.py
# reads version.txt, verl's verl/version/version, NeMo-RL's nemo_rl/package_info.py, slime's setup.py says it
_VERSION_FILES = ("version.txt", "verl/version/version")
_NEMO_RL_PARTS = re.compile(r"^(MAJOR|MINOR|PATCH|PRE_RELEASE) = (?:(\d+)|\"([^\"]*)\")$", re.M)
_SETUP_VERSION = re.compile(r"""^\s*version\s*=\s*["']([^"']+)["']""", re.M)


def declared_version(checkout: Path) -> str | None:
    """The framework version a checkout declares, or None: its commands are planned as that release's
    (`hpcplace.framework_version`), not as the release installed where hpcplace runs."""
    for name in _VERSION_FILES:
        if (checkout / name).is_file():
            return (checkout / name).read_text(encoding="utf-8").strip() or None
    info = checkout / "nemo_rl" / "package_info.py"
    if info.is_file():
        parts = {m.group(1): m.group(2) or m.group(3) for m in _NEMO_RL_PARTS.finditer(info.read_text("utf-8"))}
        if {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
            return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts.get('PRE_RELEASE') or ''}"
    setup = checkout / "setup.py"
    found = _SETUP_VERSION.search(setup.read_text(encoding="utf-8")) if setup.is_file() else None
    return found.group(1) if found else None


def main(argv: list[str]) -> int:
    ours, plan_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--site", type=Path, help="the site file (default: a slurm: block of 8-GPU a800 nodes)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds each script may run (default 30)")
    parser.add_argument("--jobs", type=int, default=2, help="scripts run and commands planned at once (default 2)")
    parser.add_argument("--no-sandbox", action="store_true", help="run the scripts without namespaces (unsafe)")
    args = parser.parse_args(ours)
    sandbox = not args.no_sandbox
    if sandbox and not sandbox_available():
        parser.error("`unshare -rnm` is not available here: the scripts cannot be sandboxed (--no-sandbox runs them "
                     "anyway, with network and write access)")  # fmt: skip
    tracebacks = 0
    with tempfile.TemporaryDirectory(prefix="command-sweep-") as tmp:
        work = Path(tmp)
        site = args.site.resolve() if args.site else work / "site.yaml"
        if not args.site:
            site.write_text(SITE, encoding="utf-8")
        for n, checkout in enumerate(args.checkouts):
            version = declared_version(checkout)
            stated = [f"hpcplace.framework_version={version}"] if version else []
            runs, planned = sweep(
                checkout,
                work / f"c{n}",
                site,
                [*stated, *plan_args],
                timeout=args.timeout,
                jobs=args.jobs,
                sandbox=sandbox,
            )
            name = f"{checkout.name} (planned as version {version})" if version else checkout.name
            print("\n".join(report(name, runs, planned)), flush=True)
            tracebacks += sum(o.kind == "traceback" for _, o in planned)
    return 1 if tracebacks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
