"""The e2e tests' pytest time limit follows ROLLOUT_E2E_TIMEOUT, which they wait for themselves:
with the suite's 120 s, a slow cluster ended them in `Failed: Timeout` before their own limit,
and the operator's log they print on failure was never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


@pytest.mark.parametrize(("setting", "limit"), [("42", "342.0"), ("", "900.0")])
def test_e2e_tests_get_their_own_time_limit(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    setting: str,
    limit: str,
) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini(
        "[pytest]\nmarkers =\n    e2e: on a cluster\ntimeout = 120\n"
        "asyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(
        test_limits="""
        import pytest

        @pytest.mark.e2e
        def test_on_a_cluster(request):
            print("E2E LIMIT", request.node.get_closest_marker("timeout").args[0])

        def test_elsewhere(request):
            print("OTHER LIMIT", request.node.get_closest_marker("timeout"))
        """
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("ROLLOUT_E2E_TIMEOUT", setting)
    result = pytester.runpytest("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*E2E LIMIT {limit}*", "*OTHER LIMIT None*"])
