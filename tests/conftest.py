"""Test configuration: tests marked ``device`` run only where CuPy sees a CUDA GPU; recorded
cases outside CI's sample (marked ``full_replay``, tests/ci_sample.py) run only with
``--full-replay``; one line per finished test module shows the run's progress."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=200, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("deep", max_examples=20_000, deadline=None)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser):
    parser.addoption("--full-replay", action="store_true", default=False,
                     help="also replay the recorded device cases outside CI's sample "
                          "(tests marked full_replay; see docs/testing.md)")


#: the modules that take the longest (tens of seconds to two minutes each), slowest first: they
#: are handed to xdist's workers first so that no long module starts last while the other
#: worker idles. A module missing here only costs balance, never a test.
SLOW_FIRST = ("test_cli.py", "test_fa3_api.py", "test_fa3_library.py", "test_hardening.py",
              "test_hypothesis_replay.py", "test_notebooks.py", "test_run_cli.py", "test_mma_fast.py")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist
        config.pluginmanager.register(ModuleProgress(config), "fa3sim-module-progress")
        if getattr(config.option, "loadscopereorder", None) is not None:
            config.option.loadscopereorder = False  # keep SLOW_FIRST's order, not test counts'


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--full-replay"):
        sampled_out = [item for item in items if item.get_closest_marker("full_replay")]
        if sampled_out:
            config.hook.pytest_deselected(items=sampled_out)
            items[:] = [item for item in items if not item.get_closest_marker("full_replay")]
        sampled_out = len(sampled_out)
        if hasattr(config, "workeroutput"):  # an xdist worker: the controller reports the count
            config.workeroutput["full_replay_deselected"] = sampled_out
        elif (progress := config.pluginmanager.get_plugin("fa3sim-module-progress")) is not None:
            progress.deselected = sampled_out
    slow = {name: rank for rank, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: slow.get(item.path.name, len(slow)))  # stable: file order kept
    if not any("device" in item.keywords for item in items):
        return
    from simulator.device import gpu_available

    ok, reason = gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU through CuPy: {reason}")
    for item in items:
        if "device" in item.keywords:
            item.add_marker(skip)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class ModuleProgress:
    """Prints ``[k/N] tests/test_x.py: passed P, failed F, skipped S (T s)`` when the last test of
    a module has finished, T being the sum of its tests' setup, call and teardown durations. It
    runs where the reports arrive: in the xdist controller (the workers' reports are forwarded
    to it), or in the only process. The counts come after their words so that the lines do
    not read as pytest's final ``N passed, N failed`` summary, which log parsers look for."""

    def __init__(self, config):
        self.config = config
        self.expected: Counter[str] = Counter()
        self.finished: Counter[str] = Counter()
        self.outcomes: dict[str, Counter[str]] = {}
        self.seconds: Counter[str] = Counter()
        self.modules_done = 0
        self.deselected = 0
        self.start = time.monotonic()

    def _expect(self, nodeids) -> None:
        if not self.expected:  # xdist: every worker reports the same collection
            self.expected.update(_module(n) for n in nodeids)

    def pytest_collection_finish(self, session):
        self._expect(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self._expect(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        self.deselected = max(self.deselected, node.workeroutput.get("full_replay_deselected", 0))

    def pytest_runtest_logreport(self, report):
        mod = _module(report.nodeid)
        self.seconds[mod] += report.duration
        counts = self.outcomes.setdefault(mod, Counter())
        if report.when == "call" or (report.when == "setup" and not report.passed):
            counts["failed" if report.failed else "skipped" if report.skipped else "passed"] += 1
        elif report.when == "teardown" and report.failed:
            counts["failed"] += 1
        if report.when != "teardown":
            return
        self.finished[mod] += 1
        if self.finished[mod] == self.expected.get(mod):
            self.modules_done += 1
            tr = self.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                if getattr(getattr(tr, "_tw", None), "width_of_current_line", 0):
                    tr.write("\n")  # after xdist's progress dots
                tr.write_line(f"[{self.modules_done}/{len(self.expected)}] {mod}: passed "
                              f"{counts['passed']}, failed {counts['failed']}, skipped "
                              f"{counts['skipped']} ({self.seconds[mod]:.1f} s)")

    def pytest_terminal_summary(self, terminalreporter):
        if self.seconds:
            terminalreporter.write_line(
                f"modules: {len(self.seconds)}, tests' own time summed {sum(self.seconds.values()):.0f} s, "
                f"wall {time.monotonic() - self.start:.0f} s")
        if self.deselected:
            terminalreporter.write_line(
                f"recorded device cases outside CI's sample, not replayed: {self.deselected} "
                "(--full-replay replays them; docs/testing.md)")
