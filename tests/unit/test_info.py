"""`.info` files: the original example, round trips, and hostile input."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qtools.qformat import (CallCounts, CallStacks, Form, Histogram, Info, MapRange, ObjectRef,
                            QFormatError, Symbol, TaskInfo, dump_info, parse_info, read_info)
from qtools.qformat.sexp import dump_forms, parse_forms

ORIGINAL = """\
(q:info '((q:syscollect-cmdline . ("q-syscollect" "-t" "20" "-v"))
          (q:cmdline . ("p-fan"))))
(q:histogram '((q:file . "p-fan-pid11920-cpu0.hist#0")
              (q:event-name . "CPU_CYCLES") (q:x-unit-label . "address")
              (q:y-unit-label . "seconds") (q:y-unit-conversion-factor . 1.1e-09)
              (q:y-granularity . 0.00100057)))
(q:call-counts '((q:file . "p-fan-pid11920-cpu0.edge#0")))
(q:kallsyms ".kallsyms.crc32.c23c2a57")
(q:object '((q:name . "p-fan") (q:file . ".p-fan.crc32.eb5a8b94")
           (q:maps .
            ((q:addr . #x4000000000000000) (q:size . 16384) (q:offset . #x0))
            ((q:addr . #x6000000000000000) (q:size . 16384) (q:offset . #x0)))))
"""


def test_original_example_reads_as_written():
    info = parse_info(ORIGINAL, "p-fan-pid11920-cpu0.info#0")
    assert info.task.syscollect_cmdline == ["q-syscollect", "-t", "20", "-v"]
    assert info.task.cmdline == ["p-fan"]
    assert info.histogram == Histogram(
        file="p-fan-pid11920-cpu0.hist#0", event_name="CPU_CYCLES", x_unit_label="address",
        y_unit_label="seconds", y_unit_conversion_factor=1.1e-09, y_granularity=0.00100057)
    assert info.call_counts == CallCounts(file="p-fan-pid11920-cpu0.edge#0")
    assert info.kallsyms == ".kallsyms.crc32.c23c2a57"
    (obj,) = info.objects
    assert obj.name == "p-fan" and obj.file == ".p-fan.crc32.eb5a8b94"
    assert obj.maps == [MapRange(0x4000000000000000, 16384, 0),
                        MapRange(0x6000000000000000, 16384, 0)]
    assert parse_info(dump_info(info)) == info


def test_canonical_form_is_stable_and_keeps_the_original_style():
    text = dump_info(parse_info(ORIGINAL))
    assert dump_info(parse_info(text)) == text
    assert "(q:addr . #x4000000000000000)" in text
    assert text.startswith("(q:info '((q:syscollect-cmdline . (\"q-syscollect\"")


def test_reading_without_objects_skips_them_but_not_their_checks():
    full = parse_info(ORIGINAL, "p-fan-pid11920-cpu0.info#0")
    lean = parse_info(ORIGINAL, "p-fan-pid11920-cpu0.info#0", objects=False)
    assert full.objects and not lean.objects
    assert lean.task == full.task and lean.histogram == full.histogram
    unbalanced = ORIGINAL.replace("(q:object '((q:name", "(q:object '(((q:name", 1)
    with pytest.raises(QFormatError):
        parse_info(unbalanced, "x.info#0", objects=False)


def test_the_run_of_a_set():
    info = parse_info('(q:info \'((q:hostname . "h1") (q:run-id . "3f2a9c0e1b7d")\n'
                      '             (q:run-start . 1763900000.25)))')
    assert (info.task.run_id, info.task.run_start) == ("3f2a9c0e1b7d", 1763900000.25)
    assert info.task.extra == {}
    text = dump_info(info)
    assert '(q:run-id . "3f2a9c0e1b7d")' in text and "(q:run-start . 1763900000.25)" in text
    old = parse_info("(q:info '((q:hostname . \"h1\")))")  # written before run ids
    assert old.task.run_id is None and old.task.run_start is None


def test_kernel_from_is_an_address_written_in_hex():
    info = parse_info("(q:info '((q:arch . \"x86_64\") (q:kernel-from . #xff11000000400000)))")
    assert info.task.kernel_from == 0xFF11_0000_0040_0000 and info.task.extra == {}
    assert "(q:kernel-from . #xff11000000400000)" in dump_info(info)
    assert parse_info("(q:info '((q:arch . \"x86_64\")))").task.kernel_from is None
    for bad in ("#x-10", '"ffff"'):
        with pytest.raises(QFormatError, match="q:kernel-from"):
            parse_info(f"(q:info '((q:kernel-from . {bad})))")
    with pytest.raises(QFormatError, match="beyond 64 bits"):  # no integer is that large
        parse_info("(q:info '((q:kernel-from . #x10000000000000000)))")


def test_one_map_written_loosely_is_one_map():
    info = parse_info("(q:object '((q:name . \"a\") (q:maps . ((q:addr . #x10) (q:size . 32)"
                      " (q:offset . 0)))))")
    assert info.objects[0].maps == [MapRange(0x10, 32, 0)]


def test_unknown_forms_and_keys_are_kept():
    text = ('(q:info \'((q:pid . 7) (q:future-key . ("a" 1))))\n'
            '(q:histogram \'((q:file . "x-pid7-cpu0.hist#0") (q:bins . 12)))\n'
            '(q:future-form 1 "two" (3 4))\n'
            '(q:object \'((q:name . "a") (q:maps . ((q:addr . 1) (q:size . 2) (q:offset . 0)'
            ' (q:prot . "r-x"))) (q:inode . 99)))\n')
    info = parse_info(text)
    assert info.task.pid == 7 and info.task.extra == {"q:future-key": ["a", 1]}
    assert info.histogram.extra == {"q:bins": 12}
    assert info.extra_forms == [Form("q:future-form", [1, "two", [3, 4]])]
    assert info.objects[0].extra == {"q:inode": 99}
    assert info.objects[0].maps[0].extra == {"q:prot": "r-x"}
    again = parse_info(dump_info(info))
    assert again == info


def test_comments_and_symbols_survive():
    info = parse_info("; written by hand\n(q:info '((q:comm . \"sh\") (q:flag . t)))")
    assert info.task.comm == "sh"
    assert info.task.extra["q:flag"] == Symbol("t")
    assert isinstance(parse_info(dump_info(info)).task.extra["q:flag"], Symbol)


@pytest.mark.parametrize("text", [
    'he said "hi"', "back\\slash", "tab\tnew\nline", "ünïcødé ✓ 日本", "\\\"", "", "#x10",
    "(not a list)", "'quoted'", "; not a comment",
])
def test_strings_round_trip(text):
    info = Info(task=TaskInfo(comm=text, cmdline=[text, text + "x"]))
    assert parse_info(dump_info(info)) == info


# ---------------------------------------------------------------- hypothesis

_symbol_text = st.from_regex(r"[a-z][a-z0-9:-]{0,12}", fullmatch=True).filter(
    lambda s: s not in ("nan", "inf", "infinity"))
_keys = _symbol_text.map(lambda s: "q:x-" + s)
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_ints = st.integers(min_value=-(1 << 64) + 1, max_value=(1 << 64) - 1)  # sexp.INT_LIMIT
_floats = st.floats(allow_nan=False, allow_infinity=False)
_leaf = st.one_of(_text, _ints, _floats, _symbol_text.map(Symbol))
_values = st.recursive(
    _leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(_keys, inner, min_size=1, max_size=4)),
    max_leaves=20)


@given(st.lists(st.builds(lambda tag, args: Form("q:" + tag, args), _symbol_text,
                          st.lists(_values, min_size=1, max_size=3)), max_size=6))
@settings(max_examples=300)
def test_forms_round_trip(forms):
    assert parse_forms(dump_forms(forms)) == forms


_names = st.from_regex(r"[a-zA-Z0-9_][a-zA-Z0-9_.+-]{0,20}", fullmatch=True).filter(
    lambda s: ".." not in s)
_opt = lambda s: st.none() | s  # noqa: E731
_u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
_extra = st.dictionaries(_keys, _values, max_size=2)
_dates = st.floats(min_value=0.0, max_value=253402300799.0)  # the range of the time keys
_factors = st.floats(min_value=0.0, max_value=1e9, exclude_min=True)

_infos = st.builds(
    Info,
    task=st.builds(
        TaskInfo, format_version=_opt(st.integers(0, 9)),
        syscollect_cmdline=_opt(st.lists(_text, max_size=4)), cmdline=_opt(st.lists(_text)),
        comm=_opt(_text), exe=_opt(_text), pid=_opt(st.integers(0, 1 << 22)),
        pids=_opt(st.lists(st.integers(0, 1 << 22), max_size=5)), cpu=_opt(st.integers(0, 4096)),
        hostname=_opt(_text), run_id=_opt(st.from_regex(r"[0-9a-f]{12}", fullmatch=True)),
        run_start=_opt(_dates), start_time=_opt(_dates), end_time=_opt(_dates),
        samples=_opt(_u64), lost_samples=_opt(_u64),
        task_stats=_opt(st.dictionaries(_keys, _ints, min_size=1, max_size=3)), extra=_extra),
    histogram=_opt(st.builds(Histogram, file=_names, event_name=_opt(_text),
                             y_unit_conversion_factor=_opt(_factors), extra=_extra)),
    call_counts=_opt(st.builds(CallCounts, file=_names)),
    call_stacks=_opt(st.builds(CallStacks, file=_names, unwinder=_opt(st.sampled_from(
        ["fp", "dwarf", "lbr"])))),
    kallsyms=_opt(_names), vdso=_opt(_names), perf_maps=st.lists(_names, max_size=3),
    objects=st.lists(st.builds(
        ObjectRef, name=_text, file=_opt(_names), path=_opt(_text),
        build_id=_opt(st.from_regex(r"[0-9a-f]{40}", fullmatch=True)),
        maps=st.lists(st.builds(MapRange, _u64, _u64, _u64), max_size=3), extra=_extra),
        max_size=4),
)


@given(_infos)
@settings(max_examples=300)
def test_info_round_trips(info):
    assert parse_info(dump_info(info)) == info


# ---------------------------------------------------------------- bad input

BAD = {
    "truncated": (ORIGINAL[:-40], 9, "unclosed"),
    "unbalanced": ("(q:info '((q:pid . 1))))", 1, "unbalanced"),
    "unterminated string": ("(q:info '((q:comm . \"abc)))\n\n", 1, "unterminated"),
    "bad hex": ("\n(q:object '((q:name . \"a\") (q:maps . ((q:addr . #xZZ)))))", 2, "hex"),
    "deep": ("(q:x " + "(" * 100_000 + ")" * 100_001, 1, "nesting"),
    "text outside": ("(q:info '((q:pid . 1)))\nhello", 2, "outside"),
    "not a symbol tag": ('("q:info" 1)', 1, "symbol"),
    "wrong type": ("(q:info '((q:pid . \"seven\")))", 1, "q:pid"),
    "file with slash": ("(q:histogram '((q:file . \"../etc/passwd\")))", 1, "plain"),
    "file with dotdot": ("(q:histogram '((q:file . \"..\")))", 1, "plain"),
    "kallsyms path": ('(q:kallsyms "/proc/kallsyms")', 1, "plain"),
    "missing file": ("(q:histogram '((q:event-name . \"x\")))", 1, "q:file"),
    "duplicate form": ("(q:histogram '((q:file . \"a\")))\n(q:histogram '((q:file . \"b\")))",
                       2, "more than one"),
    "duplicate key": ("(q:info '((q:pid . 1) (q:pid . 2)))", 1, "duplicate"),
    "negative map": ("(q:object '((q:name . \"a\") (q:maps . ((q:addr . -1) (q:size . 1)))))",
                     1, "negative"),
    "two values": ("(q:kallsyms \"a\" \"b\")", 1, "one value"),
    "empty form": ("()", 1, "empty"),
    "brackets": ("(q:info [1])", 1, "'['"),
    "misplaced dot": ("(q:info '(1 . 2 . 3))", 1, "misplaced '.'"),
    "lone pair": ("(q:x (q:a . 1 . 2))", 1, "dotted pair"),
    "run id not a string": ("(q:info '((q:run-id . 12)))", 1, "q:run-id"),
    "huge number": ("(q:info '((q:start-time . 1" + "0" * 400 + ".0)))", 1, "range"),
    "huge hex": ("(q:info\n '((q:pid . #x" + "f" * 2_000_000 + ")))", 1, "beyond 64 bits"),
    "hex of 65 bits": ("(q:x #x-1" + "0" * 16 + ")", 1, "beyond 64 bits"),
    "decimal of 65 bits": ("\n(q:x " + str(1 << 64) + ")", 2, "beyond 64 bits"),
    "huge decimal": ("(q:info '((q:pid . " + "9" * 4000 + ")))", 1, "beyond 64 bits"),
    "decimal past the digit limit": ("(q:info '((q:pid . " + "9" * 5000 + ")))", 1, "range"),
    "negative pid": ("(q:info '((q:pid . -5)))", 1, "q:pid: out of range (want not negative)"),
    "negative pid listed": ("(q:info '((q:pids . (1 -2))))", 1, "q:pids: out of range"),
    "date past 9999": ("(q:info '((q:start-time . 1e300)))", 1, "q:start-time: out of range"),
    "negative factor": ("(q:histogram '((q:file . \"a\") (q:y-unit-conversion-factor . -1)))",
                        1, "q:y-unit-conversion-factor: out of range (want above 0"),
    "factor too large": ("(q:threads '((q:file . \"a\") (q:time-conversion-factor . 1e10)))",
                         1, "at most 1e9"),
    "quote before nothing": ("(q:info\n '((q:pid . 1)) ')", 1, "quote"),
    "backslash outside a string": ("\n(q:info '((q:comm . a\\ b)))", 2, "'\\\\'"),
    "string between forms": ("(q:info '((q:pid . 1)))\n\"x\"", 2, "outside"),
    "syntax error after a bad value": ("(q:x #xZZ\n [1])", 2, "'['"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_info_raises_format_error_with_line(case):
    text, line, words = BAD[case]
    with pytest.raises(QFormatError) as e:
        parse_info(text, "x.info#0")
    assert e.value.path == "x.info#0"
    assert e.value.line == line, str(e.value)
    assert words.lower() in str(e.value).lower()


def test_integers_of_64_bits_are_read_and_written_and_no_larger():
    top = (1 << 64) - 1
    (form,) = parse_forms(f"(q:x #x{top:x} #x-{top:x} {top} -{top} #x{'0' * 40}1)")
    assert form.args == [top, -top, top, -top, 1]
    assert parse_forms(dump_forms([form])) == [form]
    for too_large in (1 << 64, -(1 << 64)):
        with pytest.raises(ValueError, match="beyond 64 bits"):
            dump_forms([Form("q:x", [too_large])])


def test_string_escapes_read_as_documented():
    (form,) = parse_forms('(q:x "a\\nb\\tc\\qd\\\\e\\"f\\\ng")')
    assert form.args == ['a\nb\tc\\qd\\e"f\\\ng']


def test_hostile_input_is_read_without_recursion():
    (form,) = parse_forms("(q:x " + "'" * 200_000 + "a)")
    assert form.args == [Symbol("a")]
    forms = parse_forms("(q:x " + "(" * 63 + ")" * 64 + "\n" * 2)
    assert len(forms) == 1 and forms[0].line == 1


def test_non_utf8_is_reported_with_its_line(tmp_path):
    p = tmp_path / "bad.info#0"
    p.write_bytes(b"(q:info '((q:pid . 1)))\n(q:info '((q:comm . \"\xff\xfe\")))")
    with pytest.raises(QFormatError) as e:
        read_info(p)
    assert e.value.line == 2 and "UTF-8" in str(e.value) and str(p) in str(e.value)


def test_missing_file_is_a_format_error(tmp_path):
    with pytest.raises(QFormatError, match="cannot read"):
        read_info(tmp_path / "nope.info#0")


@given(st.text(alphabet=string.printable + "()'#.\"\\;", max_size=200))
@settings(max_examples=500)
def test_random_text_never_crashes_the_reader(text):
    try:
        parse_info(text)
    except QFormatError:
        pass


@given(st.binary(max_size=200))
@settings(max_examples=300)
def test_random_bytes_never_crash_the_reader(data):
    try:
        parse_info(data)
    except QFormatError:
        pass


def test_reading_a_small_info_takes_little_memory(tmp_path):
    import tracemalloc
    path = tmp_path / "a-pid1-cpu0.info#0"
    path.write_text("(q:info '((q:pid . 1)))\n")
    tracemalloc.start()
    try:
        read_info(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # not the 64 MiB size limit allocated up front


def test_info_over_the_size_limit_is_refused(tmp_path):
    from qtools.qformat.limits import LimitExceeded, Limits
    path = tmp_path / "a-pid1-cpu0.info#0"
    path.write_text("(q:info '((q:comm . \"" + "x" * 200 + "\")))\n")
    with pytest.raises(LimitExceeded, match="over the limit of 100 bytes") as e:
        read_info(path, limits=Limits(info_size=100))
    assert e.value.key == "info-size"
    read_info(path, limits=Limits(info_size=300))
