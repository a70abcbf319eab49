"""The outcome of a client library's own test suite run against a broker (java-suite,
go-suite): reads each test's result (surefire's XML reports, or `go test -v` output), prints
the totals and the failures, and says whether the run passes: every failing test must be
listed in the suite's known-failures.txt for this broker (a line `Class#method BROKERS
reason`, or `TestName BROKERS reason` for Go; BROKERS `both` or `warren`, or `race` for a test
whose own race fails it now and then on any broker; an entry ending in `*` covers the tests
whose names start with the rest, `Class#*` a whole class). A reason may name the failure
it excuses, `when "TEXT"`: a failure whose report does not contain TEXT is unexpected (a race
analysed once excuses that race, not any later failure of the test). Listed tests that
passed are printed (races aside: they usually pass), so the list can shrink.

    suite_outcomes.py surefire|go-test REPORTS KNOWN_FAILURES BROKER LABEL
"""

import glob
import re
import sys
import xml.etree.ElementTree as ET


def known_failures(path, broker):
    known = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            test, brokers, reason = (line.split(None, 2) + ["", ""])[:3]
            if brokers in ("both", "race", broker):
                known[test] = (brokers, reason)
    return known


def failure_summary(found, classname):
    """The failure's message (AssertJ's start with a blank line, so the first lines that have
    text, joined) and where in the test class it was raised, to tell one assertion from
    another in a test that has several."""
    lines = [l.strip() for l in (found.get("message") or found.get("type") or "").splitlines()]
    summary = " ".join(l for l in lines if l)[:240]
    simple = classname.rsplit(".", 1)[-1]
    for line in (found.text or "").splitlines():
        line = line.strip()
        if line.startswith(f"at {classname}.") and f"({simple}.java:" in line:
            return f"{summary} ({line[3:]})"
    return summary


def surefire_outcomes(reports):
    """(Class#method, outcome, message, report) for every test case, outcome one of passed /
    failed / error / skipped, report the failure's whole text (stack trace and causes)."""
    cases = []
    for report in sorted(glob.glob(f"{reports}/TEST-*.xml")):
        for case in ET.parse(report).getroot().iter("testcase"):
            name = case.get("classname", "").rsplit(".", 1)[-1] + "#" + case.get("name", "")
            outcome, message, text = "passed", "", ""
            for kind in ("failure", "error", "skipped"):
                found = case.find(kind)
                if found is not None:
                    outcome = {"failure": "failed"}.get(kind, kind)
                    message = failure_summary(found, case.get("classname", ""))
                    text = (found.get("message") or "") + "\n" + (found.text or "")
                    break
            cases.append((name, outcome, message, text))
    return cases


def go_test_outcomes(log):
    """(TestName, outcome, message, report) for every top-level test of a `go test -v` run
    (subtests count in their parent; the report is the message); a test the binary was
    killed in (timeout, panic) is an error."""
    cases, running, last_output = [], [], {}
    with open(log, errors="replace") as f:
        for line in f:
            m = re.match(r"^=== RUN\s+(\S+)$", line)
            if m and "/" not in m.group(1):
                running.append(m.group(1))
                continue
            m = re.match(r"^--- (PASS|FAIL|SKIP): (\S+) ", line)
            if m:
                outcome = {"PASS": "passed", "FAIL": "failed", "SKIP": "skipped"}[m.group(1)]
                message = last_output.get(m.group(2), "")
                cases.append((m.group(2), outcome, message, message))
                if m.group(2) in running:
                    running.remove(m.group(2))
                continue
            m = re.match(r"^\s+(\S+_test\.go:\d+: .*)", line)
            if m and running:
                last_output.setdefault(running[-1], m.group(1)[:160])
    for name in running:
        message = "did not finish (the test binary stopped)"
        cases.append((name, "error", message, message))
    with open(log, errors="replace") as f:
        text = f.read()
    # amqp091-go's TestMain runs goleak after every test passed: a connection left open
    # (its reader and heartbeater goroutines) fails the binary.
    if "goleak: Errors on successful test run" in text:
        message = "goroutines left running after the tests"
        cases.append(("goleak", "error", message, message))
    return cases


def listing(known, name):
    """The known-failures entry for test `name`: itself, or an entry ending in `*` that
    starts it (`Class#*`, `Class#method*` for every case of a parameterised test)."""
    if name in known:
        return known[name]
    for entry, value in known.items():
        if entry.endswith("*") and name.startswith(entry[:-1]):
            return value
    return None


def excused(entry, report):
    """Whether a failure with `report` is the one known-failures entry `entry` (brokers,
    reason) excuses: any failure, unless the reason names one with `when "TEXT"`."""
    if entry is None:
        return False
    named = re.search(r'\bwhen "([^"]+)"', entry[1])
    return named is None or named.group(1) in report


def main():
    kind, reports, known_path, broker, label = sys.argv[1:6]
    known = known_failures(known_path, broker)
    cases = {"surefire": surefire_outcomes, "go-test": go_test_outcomes}[kind](reports)
    count = {k: sum(1 for _, o, _, _ in cases if o == k) for k in ("passed", "failed", "error", "skipped")}
    unexpected, expected = [], []
    for name, outcome, message, report in cases:
        if outcome in ("failed", "error"):
            known_one = excused(listing(known, name), report)
            (expected if known_one else unexpected).append((name, outcome, message))
    for name, outcome, message in expected:
        _, reason = listing(known, name)
        print(f"{label}: known ({reason}): {name} {outcome}")
    for name, outcome, message in unexpected:
        print(f"{label}: UNEXPECTED {outcome}: {name}: {message}")
    now_passing = sorted(
        name
        for name, outcome, _, _ in cases
        if outcome == "passed" and name in known and known[name][0] != "race"
    )
    for name in now_passing:
        print(f"{label}: listed in known-failures.txt but passed: {name}")
    print(
        f"{label} ({broker}): {count['passed']} passed, {count['failed']} failed, "
        f"{count['error']} errors, {count['skipped']} skipped; "
        f"{len(expected)} of the failures known, {len(unexpected)} unexpected"
    )
    if not cases:
        print(f"{label}: no test ran")
        return 1
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
