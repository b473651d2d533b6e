"""pytest plugin: run a test suite with openreg's debug modes on, and fail the tests that race.

One line in CI::

    pytest -p torch_openreg.pytest_plugin --openreg-debug=races,poison

(or ``addopts = "-p torch_openreg.pytest_plugin --openreg-debug=races,poison"`` under
``[tool.pytest.ini_options]``). The modes are those of ``OPENREG_DEBUG``
(``races``, ``poison``, ``chaos``); ``--openreg-debug-seed`` fixes the chaos seed.
A test during which a stream race was reported fails with the report; a test
that races on purpose can be marked ``@pytest.mark.openreg_races_expected``.
The plugin loads torch only when the option is given.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

_MODES = ("races", "poison", "chaos")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("openreg", "openreg debug modes")
    group.addoption(
        "--openreg-debug",
        default=None,
        metavar="MODES",
        help="comma-separated openreg debug modes to run the tests with: races, poison, chaos",
    )
    group.addoption(
        "--openreg-debug-seed",
        default=None,
        metavar="SEED",
        help="seed of chaos scheduling, 1 to 2**64-1 (default: OPENREG_DEBUG_SEED, else random; "
        "printed)",
    )


def _parse_modes(text: str) -> tuple[str, ...]:
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in modes if m not in _MODES]
    if unknown:
        raise pytest.UsageError(
            f"--openreg-debug={text!r}: unknown mode(s) {', '.join(unknown)}; "
            f"choose from {', '.join(_MODES)}"
        )
    return modes


class _DebugModes:
    """Switches the modes on for the session and checks each test's race count."""

    def __init__(self, modes: tuple[str, ...], seed_text: str | None) -> None:
        import torch

        import torch_openreg  # noqa: F401  (registers torch.openreg)

        self.debug = torch.openreg.debug
        self.torch = torch
        seed = None
        if seed_text is not None:
            try:  # the rule of OPENREG_DEBUG_SEED, checked before any mode changes
                seed = self.debug._seed_from_text(seed_text, "--openreg-debug-seed")
            except ValueError as error:
                raise pytest.UsageError(str(error)) from None
        self.debug.set_modes(*(self.debug.get_modes() | set(modes)))
        if seed is not None:
            if "chaos" not in self.debug.get_modes():
                raise pytest.UsageError("--openreg-debug-seed needs chaos in --openreg-debug")
            self.debug.set_chaos_seed(seed)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        before = self.debug.race_report_count()
        result = yield
        # Waiting for the devices ends the test's work: a race of memory it
        # leaves behind is not blamed on the next test.
        openreg = self.torch.openreg
        for index in range(openreg.device_count()):
            openreg.synchronize(index)
        raced = self.debug.race_report_count() - before
        if raced > 0 and item.get_closest_marker("openreg_races_expected") is None:
            reports = self.debug.race_reports()[-raced:]
            pytest.fail(
                f"openreg reported {raced} stream race(s) during this test:\n\n"
                + "\n\n".join(reports),
                pytrace=False,
            )
        return result

    def pytest_report_header(self) -> str:
        seed = self.debug.chaos_seed()
        modes = ",".join(sorted(self.debug.get_modes()))
        return f"openreg debug modes: {modes}" + (
            f" (chaos seed {seed})" if seed is not None else ""
        )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "openreg_races_expected: the test reports openreg stream races on purpose"
    )
    text = config.getoption("--openreg-debug")
    seed_text = config.getoption("--openreg-debug-seed")
    if text:
        config.pluginmanager.register(
            _DebugModes(_parse_modes(text), seed_text), "openreg-debug-modes"
        )
    elif seed_text is not None:  # it would otherwise be ignored without a word
        raise pytest.UsageError("--openreg-debug-seed needs chaos in --openreg-debug")
