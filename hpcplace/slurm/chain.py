"""A run longer than the time limit, as a chain of jobs (`submit --chain N`, `launch.chain: N`).

Every link is the same job.sbatch, submitted with `--dependency=singleton` under a job name no other
run shares (`chain_job_name`; a het job's component k > 0 is named `<name>.<k>`, slurm_job.
chain_component_name): Slurm starts a link only once every earlier job of that name and user
has ended, whatever its state. So the chain's stop is the batch script's: a link that ends the training
(exit 0 before its time-limit warning) or fails cancels the later links (templates/chain.sh.j2); a
link stopped by its time limit lets the next one run; a link Slurm requeued (`slurm.requeue`) is the same
link starting again, ending nothing (the later links wait behind it). Each link records its start and its end (with
the outcome and what it cancelled) in <run dir>/chain.jsonl; run.json lists every link's job id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hpcplace.plan.plan import Plan
from hpcplace.slurm.slurm_job import slug

CHAIN_FILE = "chain.jsonl"  # one line per link start and end, written by the batch script
STATE_DIR = "chain-state"  # HPCPLACE_CHAIN_STATE: the program's checkpoints, kept across links
LINK_LOGS = "logs/link-{link}"  # an earlier link's step logs (the running link's are in logs/)
LOGS_LINK_FILE = ".chain-logs"  # which link's step logs logs/ holds (written by the batch script)
LINK_VARIABLE = "HPCPLACE_CHAIN_LINK"  # which link a job is: passed by `submit` with sbatch --export


def chain_job_name(job_name: str, run_dir: str) -> str:
    """The chain's job name: the job's, made unique to its run directory, so `--dependency=singleton`
    orders this chain's links only (another chain of the same config runs beside it)."""
    token = hashlib.sha256(run_dir.encode("utf-8")).hexdigest()[:8]
    return f"{slug(job_name)[:48]}-chain-{token}"


def chain_plan(plan: Plan, run_dir: str) -> Plan:
    """The plan as a chain's links are lowered: under the chain's job name (slurm.job_name)."""
    if not plan.launch.chain:
        return plan
    base = plan.slurm.get("job_name") or plan.name
    return replace(plan, slurm={**plan.slurm, "job_name": chain_job_name(base, run_dir)})


def link_sbatch_argv(base: Sequence[str], link: int) -> list[str]:
    """sbatch's argv for link `link` (0-based): the script's own options, and which link it is (the
    script reads it as HPCPLACE_CHAIN_LINK; `ALL` keeps the submitting environment, sbatch's default)."""
    argv = list(base)
    return [*argv[:-1], f"--export=ALL,{LINK_VARIABLE}={link}", argv[-1]]


@dataclass(frozen=True)
class LinkRecord:
    """What chain.jsonl says about one link: when it started, and how it ended (None: running, or killed
    before it could say)."""

    link: int
    job_id: str
    started: str
    ended: str | None = None
    outcome: str | None = None  # finished | time-limit | failed | requeued (then it starts again)
    exit_code: int | None = None
    cancelled: tuple[str, ...] = ()


def read_chain(run_dir: Path) -> dict[int, LinkRecord]:
    """chain.jsonl -> link index -> its record (a requeued link's latest start). Unreadable lines are
    skipped: a node may have died mid-write."""
    path = run_dir / CHAIN_FILE
    if not path.exists():
        return {}
    return parse_chain(path.read_text(encoding="utf-8", errors="replace").splitlines())


def parse_chain(lines: Sequence[str]) -> dict[int, LinkRecord]:
    out: dict[int, LinkRecord] = {}
    for line in lines:
        try:
            event = json.loads(line)
            link = int(event["link"])
            job_id = str(event["job_id"])
        except (ValueError, KeyError, TypeError):
            continue
        if event.get("event") == "start":
            out[link] = LinkRecord(link, job_id, str(event.get("time", "")))
        elif link in out and event.get("event") == "end":
            code = event.get("exit_code")
            out[link] = replace(
                out[link],
                ended=str(event.get("time", "")),
                outcome=str(event.get("outcome", "")),
                exit_code=code if isinstance(code, int) else None,
                cancelled=tuple(str(event.get("cancelled", "")).split()),
            )
    return out


OUTCOME_TEXT = {
    "finished": "exited 0 before its time limit: the training is done, the chain ends here",
    "time-limit": "reached its time limit: the next link resumes",
    "failed": "failed: the chain stops here",
    "requeued": "was requeued by Slurm: it runs again, the later links wait for it",
}


@dataclass(frozen=True)
class LinkState:
    """One link as `status` shows it: Slurm's state of its job and what chain.jsonl says."""

    link: int
    job_id: str
    state: str  # Slurm's (PENDING, RUNNING, COMPLETED, ...); UNKNOWN when Slurm forgot it
    record: LinkRecord | None


def chain_ids(record: Mapping[str, object] | None) -> list[str]:
    """The job ids of a run's chain links from run.json (empty: not a chain)."""
    ids = (record or {}).get("chain")
    return [str(i) for i in ids] if isinstance(ids, list) else []


def current_link(links: Sequence[LinkState]) -> LinkState:
    """The link `status` details: the running one, else the last that started, else the first."""
    for link in links:
        if link.state in ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"):
            return link
    started = [link for link in links if link.record is not None]
    return started[-1] if started else links[0]


LIVE_STATES = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED")


def chain_done(links: Sequence[LinkState]) -> bool:
    return not any(link.state in LIVE_STATES for link in links)


def format_chain(links: Sequence[LinkState], length: int) -> list[str]:
    """One line per link (its job, state, and how it ended), then why the chain stopped or where it is."""
    lines = [f"chain of {length} job(s) (--dependency=singleton); each resumes from {STATE_DIR}/:"]
    for link in links:
        rec = link.record
        what = ""
        if rec is not None and rec.outcome == "requeued" and link.state in LIVE_STATES:
            what = f": {OUTCOME_TEXT['requeued']} (since {rec.ended})"
        elif rec is not None and rec.outcome:
            code = f" exit={rec.exit_code}" if rec.exit_code is not None else ""
            what = f"{code}: {OUTCOME_TEXT.get(rec.outcome, rec.outcome)}"
            if rec.cancelled:
                what += f" (cancelled the later links: job {', '.join(rec.cancelled)})"
        elif rec is not None and link.state in LIVE_STATES:
            what = f": running since {rec.started}"
        elif link.state == "PENDING":
            what = ": waits for the earlier links (singleton dependency)"
        elif link.state.startswith("CANCELLED") and rec is None:
            what = ": never ran"
        lines.append(f"  link {link.link}: job {link.job_id} {link.state}{what}")
    lines.append("  " + chain_summary(links, length))
    return lines


def chain_summary(links: Sequence[LinkState], length: int) -> str:
    """Where the chain stands in one line: which link runs, or why it ended."""
    ended = [link for link in links if link.record is not None and link.record.outcome]
    stopper = next((link for link in ended if link.record and link.record.outcome in ("finished", "failed")), None)
    if not chain_done(links):
        running = [link for link in links if link.state in ("RUNNING", "COMPLETING", "CONFIGURING")]
        if running:
            return f"link {running[0].link} of {length} runs (job {running[0].job_id})"
        return "no link runs yet: the next one waits in the queue"
    if stopper is not None and stopper.record is not None:
        if stopper.record.outcome == "finished":
            return f"the chain ended at link {stopper.link}: the training finished"
        return f"the chain stopped at link {stopper.link}: it failed with exit code {stopper.record.exit_code}"
    last = ended[-1] if ended else None
    if last is not None and last.record is not None and last.record.outcome == "time-limit" and last.link == length - 1:
        return f"all {length} links reached their time limit: the training did not finish (submit a longer chain)"
    return "the chain ended (cancelled, or its links ended without saying how: see their batch logs)"


def chain_exit_code(links: Sequence[LinkState]) -> int:
    """`status` exit code of a finished chain: 0 when a link finished the training, 10 when one failed,
    11 when the chain was cancelled, 12 when every link ran out of time; 0 while it runs."""
    if not chain_done(links):
        return 0
    outcomes = [link.record.outcome for link in links if link.record is not None and link.record.outcome]
    if "failed" in outcomes:
        return 10
    if "finished" in outcomes:
        return 0
    if any(link.state.startswith("CANCELLED") for link in links):
        return 11
    return 12
