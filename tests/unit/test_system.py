import os

from snapllm.system import _cgroup_quota_cpus, available_cpus, peak_rss_bytes, rss_bytes


def test_cgroup_quota_is_rounded_up(tmp_path):
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")
    assert _cgroup_quota_cpus(cpu_max) == 2
    cpu_max.write_text("max 100000\n")
    assert _cgroup_quota_cpus(cpu_max) is None
    assert _cgroup_quota_cpus(tmp_path / "missing") is None


def test_quota_narrows_the_affinity_mask(tmp_path):
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("100000 100000\n")
    assert available_cpus(cpu_max) == 1
    assert available_cpus(tmp_path / "missing") == len(os.sched_getaffinity(0))


def test_rss_readings():
    assert 0 < rss_bytes() <= peak_rss_bytes()
