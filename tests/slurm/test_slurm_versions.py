"""The site's Slurm, whatever its version (issue 30), without a cluster: the version read once and
refused when too old, recorded in run.json and shown by `status`; the parsers over what each version
printed (tests/slurm/data/slurm-<version>/, recorded on the project's test cluster of that release: RECORD.md);
exit codes right under both sacct encodings."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.errors import SlurmError
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm import run_report, slurm_cli, submit, validate
from hpcplace.slurm.slurm_cli import SlurmVersion, exit_status
from tests.slurm.conftest import REPO
from tests.slurm.test_submit_fake import _calls, fake_slurm  # noqa: F401  (the fixture)

DATA = Path(__file__).with_name("data")
HETERO = REPO / "configs" / "hetero-partitions.yaml"
V22 = SlurmVersion(22, 5, 8)
V26 = SlurmVersion(26, 5, 5)


def _versions() -> list[str]:
    """Every version recorded in data/ (`22.05.8`, ...)."""
    return sorted(d.name.removeprefix("slurm-") for d in DATA.glob("slurm-*") if d.is_dir())


def _sample(version: str, name: str) -> str | None:
    """What `version` printed for `name` (None: not recorded for that version)."""
    path = DATA / f"slurm-{version}" / name
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _version_of(folder: str) -> SlurmVersion:
    sample = _sample(folder, "scontrol-version.txt")
    assert sample is not None, f"slurm-{folder} has no scontrol-version.txt"
    version = slurm_cli.parse_version(sample)
    assert version is not None and str(version) == folder, (folder, sample)
    return version


# ---- the version, read and judged -----------------------------------------------------------------


@pytest.mark.parametrize("version", _versions())
def test_every_data_folder_is_the_version_its_scontrol_printed(version: str) -> None:
    assert _version_of(version) >= slurm_cli.OLDEST_SUPPORTED
    sinfo = _sample(version, "sinfo-version.txt")
    if sinfo is not None:  # sinfo and scontrol of one install say the same
        assert slurm_cli.parse_version(sinfo) == _version_of(version)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("slurm-wlm 22.05.8\n", V22),  # Debian's build (recorded: data/slurm-22.05.8/scontrol-version.txt)
        ("slurm 24.11.5\n", SlurmVersion(24, 11, 5)),  # a source build
        ("slurm 25.11.0-0rc1\n", SlurmVersion(25, 11, 0)),  # a release candidate
        ("module loaded: slurm/26.05\nslurm 26.05.5\n", V26),  # a site wrapper's banner first
        ("", None),
        ("slurm\n", None),
        ("slurm 22.05\n", None),
        ("hpcplace 22.05.8\n", None),
    ],
)
def test_parse_version(text: str, expected: SlurmVersion | None) -> None:
    assert slurm_cli.parse_version(text) == expected


def test_versions_order_as_releases_and_print_as_slurm_does() -> None:
    assert SlurmVersion(22, 5, 8) < SlurmVersion(23, 2, 0) < SlurmVersion(23, 11, 10) < SlurmVersion(24, 5, 0)
    assert str(SlurmVersion(22, 5, 8)) == "22.05.8" and SlurmVersion(25, 11, 1).release == "25.11"
    assert slurm_cli.version_from_record("26.05.5") == V26
    for absent in (None, "", "unknown", 26, "slurm 26.05.5"):  # run.json before the field, or damaged
        assert slurm_cli.version_from_record(absent) is None


def test_a_version_older_than_supported_is_refused_with_what_is_allowed() -> None:
    assert slurm_cli.check_supported(SlurmVersion(22, 5, 0)) == SlurmVersion(22, 5, 0)
    assert slurm_cli.check_supported(V26) == V26
    with pytest.raises(slurm_cli.UnsupportedSlurmError) as caught:
        slurm_cli.check_supported(SlurmVersion(21, 8, 8))
    error = caught.value
    assert error.exit_code == 3 and "Slurm 21.08.8" in error.message and "22.05 and newer" in error.message
    assert error.hint is not None and "render" in error.hint


# ---- version differences are data ------------------------------------------------------------------


def test_dialects_follow_the_version_table() -> None:
    old, new = slurm_cli.dialect(V22), slurm_cli.dialect(V26)
    assert old.sacct_subtracts_128 is True and new.sacct_subtracts_128 is False
    assert old.job_tres_keys == ("TRES",) and new.job_tres_keys == ("AllocTRES", "ReqTRES")
    assert slurm_cli.dialect(SlurmVersion(23, 2, 0)).job_tres_keys == ("AllocTRES", "ReqTRES")
    assert slurm_cli.dialect(SlurmVersion(25, 5, 9)).sacct_subtracts_128 is True  # the last release before
    assert slurm_cli.dialect(SlurmVersion(25, 11, 0)).sacct_subtracts_128 is False
    assert slurm_cli.dialect(None).sacct_subtracts_128 is None  # unknown: both readings stay open
    names = {f.name for f in dataclasses.fields(slurm_cli.SlurmDialect)}
    for change in slurm_cli.VERSION_CHANGES:
        assert change.field in names and change.what, change


def test_every_version_change_is_in_the_docs() -> None:
    page = (REPO / "docs" / "slurm-versions.md").read_text(encoding="utf-8")
    for change in slurm_cli.VERSION_CHANGES:
        assert re.search(rf"^\| {re.escape(change.since.release)} \|", page, re.MULTILINE), change
    assert f"{slurm_cli.OLDEST_SUPPORTED.release}" in page


# ---- exit codes under both sacct encodings ---------------------------------------------------------


@pytest.mark.parametrize(
    "printed,source,version,shown,terminated_by",
    [
        ("15:0", "sacct", V22, "15:0 (or 143 = 128+SIGTERM)", None),  # 22.05: 15 or 143, said so
        ("143:0", "sacct", V26, "143:0 (128+SIGTERM)", 15),  # 25.11+: as it is
        ("15:0", "sacct", V26, "15:0", None),  # 25.11+: a plain 15
        ("143:0", "sacct", None, "143:0 (128+SIGTERM)", 15),  # only 25.11+ prints 128 or more
        ("15:0", "sacct", None, "15:0 (or 143 = 128+SIGTERM)", None),  # unknown version: both readings
        ("143:0", "scontrol", V22, "143:0 (128+SIGTERM)", 15),  # scontrol never subtracts
        ("15:0", "scontrol", V22, "15:0", None),
        ("0:15", "sacct", V22, "0:15 (killed by SIGTERM)", 15),
        ("0:9", "scontrol", V26, "0:9 (killed by SIGKILL)", 9),
        ("0:0", "sacct", V22, "0:0", None),
        ("7:0", "sacct", V22, "7:0 (or 135 = 128+SIGBUS)", None),
        ("100:0", "sacct", V22, "100:0", None),  # 100 or 228: no signal either way
    ],
)
def test_exit_status_says_what_slurm_printed_and_what_it_means(
    printed: str, source: str, version: SlurmVersion | None, shown: str, terminated_by: int | None
) -> None:
    status = exit_status(printed, source=source, version=version)
    assert status is not None and str(status) == shown and status.terminated_by == terminated_by


def test_exit_status_of_nothing_is_none() -> None:
    for printed in ("", "(null)", "-", "15", "a:b"):
        assert exit_status(printed, source="sacct", version=V22) is None
    with pytest.raises(ValueError, match="squeue"):
        exit_status("0:0", source="squeue", version=V22)


@pytest.mark.parametrize("version", [V22, SlurmVersion(25, 5, 9), SlurmVersion(25, 11, 0), V26, None])
def test_every_exit_code_is_read_right_under_both_encodings(version: SlurmVersion | None) -> None:
    """Each code 0..255 as this version's sacct prints it (src/sacct/print.c: minus 128 from 128 on,
    before 25.11) reads back as that code, or as a pair holding it; never as another."""
    subtracts = slurm_cli.dialect(version).sacct_subtracts_128
    for code in range(256):
        encodings = [True, False] if subtracts is None else [subtracts]
        for minus_128 in encodings:
            printed = f"{code - 128 if minus_128 and code >= 128 else code}:0"
            if subtracts is None and not minus_128 and code < 128 and code != 0:
                continue  # a 25.11+ sacct of unknown version printing a small code: read below as a pair
            read = exit_status(printed, source="sacct", version=version)
            assert read is not None
            assert read.code == code or (read.code is None and code in read.candidates), (version, code, read)
            if code == 143:
                assert read.terminated_by == 15 or read.maybe_terminated_by == 15


@pytest.mark.parametrize("version", _versions())
def test_recorded_sacct_exit_codes_read_as_the_scenario_ran(version: str) -> None:
    """The RECORD.md scenario: exit7 is 7:0 and killed15 0:15 everywhere; exit143 is 15:0 before 25.11
    and 143:0 from 25.11 on, and reads back as 143 in both."""
    sample = _sample(version, "sacct-exit-codes.txt")
    if sample is None:
        pytest.skip(f"slurm-{version}: sacct-exit-codes.txt not recorded (RECORD.md step 4)")
    slurm = _version_of(version)
    rows = {r["JobName"]: r for r in slurm_cli.parse_parsable(sample, slurm_cli.SACCT_JOB_FIELDS)}
    assert {"exit7", "killed15", "exit143", "ok"} <= set(rows), rows
    read = {name: exit_status(r["ExitCode"], source="sacct", version=slurm) for name, r in rows.items()}
    assert read["exit7"] is not None and read["exit7"].printed == "7:0"
    assert read["killed15"] is not None and read["killed15"].terminated_by == 15
    exit143 = read["exit143"]
    assert exit143 is not None
    if slurm_cli.dialect(slurm).sacct_subtracts_128:
        assert exit143.printed == "15:0" and exit143.candidates == (15, 143) and exit143.maybe_terminated_by == 15
    else:
        assert exit143.printed == "143:0" and exit143.code == 143 and exit143.terminated_by == 15


# ---- scontrol show job of every version ------------------------------------------------------------


def _job_samples() -> list[tuple[str, str]]:
    """`scontrol show job -o` of a het job, per version: the scenario's, else the first cluster's."""
    out = []
    for version in _versions():
        sample = _sample(version, "scontrol-show-job-het.txt") or _sample(version, "scontrol-show-job-running.txt")
        if sample is not None:
            out.append((version, sample))
    return out


@pytest.mark.parametrize("version,text", _job_samples(), ids=[s[0] for s in _job_samples()])
def test_scontrol_show_job_of_each_version_parses_to_the_same_records(version: str, text: str) -> None:
    slurm = _version_of(version)
    records = [
        slurm_cli.parse_job_record(slurm_cli.parse_key_values(line), slurm)
        for line in text.splitlines()
        if line.strip()
    ]
    assert [r.het_offset for r in records] == list(range(len(records))) and len(records) >= 2
    first = int(records[0].job_id)
    assert [int(r.job_id) for r in records] == list(range(first, first + len(records)))  # consecutive ids
    for r in records:
        assert r.state == "RUNNING" and r.partition and r.nodes and r.work_dir.startswith("/")
        assert r.alloc_tres.get("node") == "1" and r.alloc_tres.get("cpu", "").isdigit()  # TRES= or AllocTRES=
        assert r.req_tres.get("node") == "1"
        assert r.std_err  # a blank StdErr (25.11+) is where stderr really goes: StdOut
        if "StdErr= " in text:
            assert r.std_err == r.std_out
    # the same record read without the version (what every version prints is accepted)
    again = [slurm_cli.parse_job_record(slurm_cli.parse_key_values(line)) for line in text.splitlines() if line.strip()]
    assert again == records


def test_the_22_05_record_reads_tres_and_its_known_values() -> None:
    """Recorded on the first (22.05.8) cluster: TRES= only, StdErr=/dev/null."""
    text = _sample("22.05.8", "scontrol-show-job-running.txt") or ""
    assert "ReqTRES" not in text and " TRES=" in text
    lead = slurm_cli.parse_job_record(slurm_cli.parse_key_values(text.splitlines()[0]), V22)
    assert lead.alloc_tres == lead.req_tres == {"cpu": "1", "mem": "1000M", "node": "1", "billing": "1"}
    assert lead.std_err == "/dev/null" and lead.work_dir == "/tmp/hp3" and lead.exit_code == "0:0"


def test_tres_keys_follow_the_version_that_printed_them() -> None:
    line = (
        "JobId=5 HetJobOffset=0 JobState=RUNNING ReqTRES=cpu=2,node=1 AllocTRES=cpu=4,node=1,gres/gpu=8 "
        "StdErr= StdOut=/r/logs/batch-5.out"
    )
    fields = slurm_cli.parse_key_values(line)
    new = slurm_cli.parse_job_record(fields, V26)
    assert new.req_tres == {"cpu": "2", "node": "1"} and new.alloc_tres["gres/gpu"] == "8"
    assert new.std_err == "/r/logs/batch-5.out"
    old_form = slurm_cli.parse_key_values("JobId=5 JobState=RUNNING TRES=cpu=4,node=1 StdErr=/r/e StdOut=/r/o")
    assert slurm_cli.parse_job_record(old_form, V22).alloc_tres == {"cpu": "4", "node": "1"}
    assert slurm_cli.parse_job_record(old_form, V22).std_err == "/r/e"


@pytest.mark.parametrize("version", _versions())
def test_nodes_and_partitions_of_each_version_give_cluster_facts(version: str) -> None:
    nodes, parts = _sample(version, "scontrol-show-node.txt"), _sample(version, "scontrol-show-partition.txt")
    if nodes is None or parts is None:
        pytest.skip(f"slurm-{version}: nodes/partitions not recorded (RECORD.md step 1)")
    facts = validate.parse_cluster_facts(
        [slurm_cli.parse_key_values(x) for x in parts.splitlines() if x.strip()],
        [slurm_cli.parse_key_values(x) for x in nodes.splitlines() if x.strip()],
    )
    assert facts.partitions and facts.nodes
    for node in facts.nodes:
        assert node.cpus > 0 and node.memory_mb > 0 and node.partitions, node
        assert all(p in facts.partitions for p in node.partitions), node
    assert any(sum(n.gres.get("gpu", {}).values()) > 0 for n in facts.nodes)  # the fake GPUs are GRES


# ---- status shows the version and reads exit codes in its encoding ---------------------------------


def _steps_status(version: str) -> submit.JobStatus:
    sample = _sample(version, "sacct-exit-codes.txt")
    assert sample is not None
    return submit.status_from_accounting("12", slurm_cli.parse_parsable(sample, slurm_cli.SACCT_JOB_FIELDS))


def test_status_shows_what_sacct_printed_and_what_it_means_on_each_version() -> None:
    old = submit.format_status(_steps_status("22.05.8"), ["cpu", "a800"], V22)
    new = submit.format_status(_steps_status("26.05.5"), ["cpu", "a800"], V26)
    assert "exit143" in old and "exit=15:0 (or 143 = 128+SIGTERM) " in old
    assert "exit=143:0 (128+SIGTERM) " in new
    for text in (old, new):
        assert "exit=0:15 (killed by SIGTERM) " in text and "exit=7:0" in text
        assert text.splitlines()[0] == "job 12: COMPLETED (from sacct)"  # the recorded job ran to its end


def test_status_version_line() -> None:
    assert run_report.slurm_version_line(V26, None) == "  slurm: 26.05.5"
    assert run_report.slurm_version_line(V26, V26) == "  slurm: 26.05.5"
    assert run_report.slurm_version_line(V26, V22) == "  slurm: 26.05.5 (the job was submitted to Slurm 22.05.8)"
    unknown = run_report.slurm_version_line(None, V22)
    assert "version unknown" in unknown and "submitted to Slurm 22.05.8" in unknown and "128" in unknown


# ---- through the CLI, with fake Slurm commands ------------------------------------------------------


@pytest.fixture(scope="module")
def hetero() -> Plan:
    return plan_from_file(HETERO)


def test_submit_records_the_version_once_and_old_run_json_still_loads(
    tmp_path: Path, fake_slurm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (fake_slurm / "version.out").write_text("slurm 24.11.5\n")
    run_dir = tmp_path / "run"
    assert main(["submit", str(HETERO), "-o", str(run_dir)]) == 0
    record = json.loads((run_dir / "run.json").read_text())
    assert record["slurm_version"] == "24.11.5"
    assert submit.recorded_slurm_version(record) == SlurmVersion(24, 11, 5)
    del record["slurm_version"]  # a run directory from before
    (run_dir / "run.json").write_text(json.dumps(record))
    assert submit.recorded_slurm_version(submit.read_record(run_dir)) is None
    assert submit.recorded_job(run_dir) == "4242"
    capsys.readouterr()


def test_an_old_slurm_is_refused_before_anything_is_submitted(
    tmp_path: Path, fake_slurm: Path, hetero: Plan, capsys: pytest.CaptureFixture[str]
) -> None:
    (fake_slurm / "version.out").write_text("slurm 21.08.8\n")
    for argv in (
        ["submit", str(HETERO), "-o", str(tmp_path / "run")],
        ["validate", str(HETERO)],
        ["submit", str(HETERO), "-o", str(tmp_path / "run"), "--no-validate"],
    ):
        assert main(argv) == 3, argv
        err = capsys.readouterr().err
        assert "hpcplace: error: this site runs Slurm 21.08.8; hpcplace supports Slurm 22.05 and newer" in err
        assert "HINT:" in err and "Traceback" not in err
    with pytest.raises(slurm_cli.UnsupportedSlurmError):
        submit.submit(hetero, tmp_path / "run")
    assert _calls(fake_slurm) == [] and not (tmp_path / "run").exists()


def test_a_version_that_cannot_be_read_is_one_clear_error(tmp_path: Path, fake_slurm: Path, hetero: Plan) -> None:
    (fake_slurm / "version.out").write_text("scontrol: unrecognized option '--version'\n")
    with pytest.raises(
        SlurmError,
        match=r"`scontrol --version` printed .* not a Slurm version such as 'slurm "
        r"22.05.8'",
    ) as caught:
        submit.submit(hetero, tmp_path / "run")
    assert caught.value.hint is not None and "slurm module" in caught.value.hint
    assert _calls(fake_slurm) == []


def test_validate_says_the_version(fake_slurm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(HETERO)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        "ok: Slurm 22.05.8: supported (22.05 and newer; what differs per version: docs/slurm-versions.md)"
    )


def test_status_shows_the_version_and_reads_exit_codes_in_its_encoding(
    tmp_path: Path, fake_slurm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert main(["submit", str(HETERO), "-o", str(run_dir)]) == 0  # recorded under 22.05.8 (the fixture's)
    sample = _sample("26.05.5", "sacct-exit-codes.txt")
    assert sample is not None
    # the recording's job as this run's: its working directory and submit time are the run's
    rows = slurm_cli.parse_parsable(sample, slurm_cli.SACCT_JOB_FIELDS)
    recorded_dir, recorded_submit = rows[0]["WorkDir"], rows[0]["Submit"]
    record = submit.read_record(run_dir)
    assert record is not None
    submitted = str(record["submitted_at"])[:19]
    (fake_slurm / "sacct.out").write_text(
        sample.replace(recorded_dir, str(run_dir)).replace(recorded_submit, submitted)
    )
    (fake_slurm / "version.out").write_text("slurm-wlm 26.05.5\n")  # the site upgraded since
    capsys.readouterr()
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "  slurm: 26.05.5 (the job was submitted to Slurm 22.05.8)" in out.splitlines()
    assert "exit=143:0 (128+SIGTERM)" in out
    (fake_slurm / "version.out").write_text("")  # unreadable: status still answers, both readings open
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "slurm: version unknown" in out and "exit=143:0 (128+SIGTERM)" in out
