"""The example-script reader of the sweeps (tests/planner/script_commands.py): files written by here-documents."""

from __future__ import annotations

import re
from pathlib import Path

from tests.planner.script_commands import extract

ENTRY = re.compile(r"(^|.*/)train\.py$")
SCRIPT = """\
GPUS=64
F=$(mktemp /tmp/sglang_XXXXXX.yaml)
cat > "${F}" <<CFG
sglang:
  - name: default
    server_groups:
      - {worker_type: prefill, num_gpus: ${GPUS}}
CFG
cat > "$G" <<'RAW'
literal: ${GPUS}
RAW
python3 train.py --sglang-config "${F}" --other "$G"
"""


def test_a_here_document_writes_the_file_its_variable_then_names(tmp_path: Path) -> None:
    [command] = extract(SCRIPT, ENTRY, {"--sglang-config", "--other"}, files=tmp_path)
    assert command.problem is None and command.line == 12
    config, raw = Path(command.words[3]), Path(command.words[5])
    assert config.parent == raw.parent == tmp_path
    assert config.read_text() == (
        "sglang:\n  - name: default\n    server_groups:\n      - {worker_type: prefill, num_gpus: 64}\n"
    )  # the unquoted tag's body expanded, as bash does
    assert raw.read_text() == "literal: ${GPUS}\n"  # a quoted tag's body as written


def test_without_a_folder_the_path_is_set_at_run_time() -> None:
    [command] = extract(SCRIPT, ENTRY, {"--sglang-config"})
    assert command.problem == "'${F}', a value placement reads, is set at run time"
