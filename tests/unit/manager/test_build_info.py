"""`jobset_build_info`: one series, always 1, naming the version, the Python and the machine."""

from __future__ import annotations

import platform

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from jobset_controller import __version__
from jobset_controller.manager.build_info import register_build_info
from jobset_controller.manager.environment import go_arch, user_agent


def test_build_info_is_one_series_set_to_one_with_version_python_and_arch() -> None:
    registry = CollectorRegistry()
    register_build_info(registry)
    labels = {"version": __version__, "python": platform.python_version(), "arch": go_arch()}
    assert registry.get_sample_value("jobset_build_info", labels) == 1
    exposed = [
        line
        for line in generate_latest(registry).decode().splitlines()
        if line.startswith("jobset_build_info")
    ]
    assert len(exposed) == 1


@pytest.mark.parametrize(
    ("machine", "arch"),
    [("x86_64", "amd64"), ("aarch64", "arm64"), ("s390x", "s390x"), ("ppc64le", "ppc64le")],
)
def test_arch_uses_gos_names_as_images_and_nodes_do(
    monkeypatch: pytest.MonkeyPatch, machine: str, arch: str
) -> None:
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert go_arch() == arch
    assert f"(linux/{arch})" in user_agent()
