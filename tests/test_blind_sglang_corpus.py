"""Issue 29's blind SGLang sets (tests/corpus/blind_sglang_r1 to _r43, each written by someone who never read
specguard), run as their RUNS.md say: the package beside SGLang 0.5.23's real tree, JSON output, scored per function
like the blind object sets. Today's numbers are floors no change may fall below (and false positives a ceiling);
each set's first run is in its RUNS.md."""

from __future__ import annotations

import pytest

from tests.conftest import unpacked
from tests.test_blind_objects_corpus import assert_no_worse

# set folder, package, (bugs, labelled functions) as LABELS.md totals them, found at least, false positives at most
SETS = {
    "first": ("blind_sglang_r1", "blindsg1", (42, 85), 33, 0),
    "second": ("blind_sglang_r2", "blindsg2", (11, 21), 11, 0),
    "third": ("blind_sglang_r3", "blindsg3", (15, 32), 14, 0),
    "fourth": ("blind_sglang_r4", "blindsg4", (24, 51), 23, 0),
    "fifth": ("blind_sglang_r5", "blindsg5", (28, 58), 27, 0),
    "sixth": ("blind_sglang_r6", "blindsg6", (30, 66), 27, 0),
    "seventh": ("blind_sglang_r7", "blindsg7", (34, 68), 34, 1),
    "eighth": ("blind_sglang_r8", "blindsg8", (38, 76), 34, 0),
    "ninth": ("blind_sglang_r9", "blindsg9", (39, 88), 36, 0),
    "tenth": ("blind_sglang_r10", "blindsg10", (43, 90), 43, 0),
    "eleventh": ("blind_sglang_r11", "blindsg11", (46, 100), 36, 2),
    "twelfth": ("blind_sglang_r12", "blindsg12", (42, 93), 38, 0),
    "thirteenth": ("blind_sglang_r13", "blindsg13", (46, 98), 44, 0),
    "fourteenth": ("blind_sglang_r14", "blindsg14", (50, 104), 45, 0),
    "fifteenth": ("blind_sglang_r15", "blindsg15", (52, 102), 50, 1),
    "sixteenth": ("blind_sglang_r16", "blindsg16", (53, 106), 50, 0),
    "seventeenth": ("blind_sglang_r17", "blindsg17", (50, 103), 47, 0),
    "eighteenth": ("blind_sglang_r18", "blindsg18", (50, 101), 46, 0),
    "nineteenth": ("blind_sglang_r19", "blindsg19", (50, 100), 47, 2),
    "twentieth": ("blind_sglang_r20", "blindsg20", (50, 100), 47, 0),
    "twenty-first": ("blind_sglang_r21", "blindsg21", (50, 100), 46, 1),
    "twenty-second": ("blind_sglang_r22", "blindsg22", (50, 100), 46, 1),
    "twenty-third": ("blind_sglang_r23", "blindsg23", (50, 100), 40, 2),
    "twenty-fourth": ("blind_sglang_r24", "blindsg24", (50, 100), 50, 0),
    "twenty-fifth": ("blind_sglang_r25", "blindsg25", (50, 100), 49, 0),
    "twenty-sixth": ("blind_sglang_r26", "blindsg26", (50, 100), 44, 3),
    "twenty-seventh": ("blind_sglang_r27", "blindsg27", (50, 100), 44, 0),
    "twenty-eighth": ("blind_sglang_r28", "blindsg28", (50, 100), 44, 1),
    "twenty-ninth": ("blind_sglang_r29", "blindsg29", (50, 100), 48, 1),
    "thirtieth": ("blind_sglang_r30", "blindsg30", (50, 100), 41, 2),
    "thirty-first": ("blind_sglang_r31", "blindsg31", (50, 100), 32, 2),
    "thirty-second": ("blind_sglang_r32", "blindsg32", (50, 100), 38, 0),
    "thirty-third": ("blind_sglang_r33", "blindsg33", (50, 100), 31, 3),
    "thirty-fourth": ("blind_sglang_r34", "blindsg34", (50, 100), 37, 0),
    "thirty-fifth": ("blind_sglang_r35", "blindsg35", (50, 100), 26, 4),
    "thirty-sixth": ("blind_sglang_r36", "blindsg36", (50, 100), 37, 1),
    "thirty-seventh": ("blind_sglang_r37", "blindsg37", (50, 100), 43, 2),
    "thirty-eighth": ("blind_sglang_r38", "blindsg38", (50, 100), 45, 2),
    "thirty-ninth": ("blind_sglang_r39", "blindsg39", (50, 100), 44, 2),
    "fortieth": ("blind_sglang_r40", "blindsg40", (50, 100), 42, 1),
    "forty-first": ("blind_sglang_r41", "blindsg41", (50, 100), 45, 0),
    "forty-second": ("blind_sglang_r42", "blindsg42", (50, 100), 43, 2),
    "forty-third": ("blind_sglang_r43", "blindsg43", (50, 100), 40, 2),
}


@pytest.mark.parametrize("name", list(SETS))
def test_a_blind_sglang_set_is_no_worse_than_today(name: str, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert_no_worse(cli, tmp_path, *SETS[name], framework=unpacked("sglang", "0.5.23"))
