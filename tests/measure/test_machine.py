"""helpers.measure.machine: /proc/stat, the load probe and the one contended rule."""

from __future__ import annotations

import pytest

from helpers.measure import machine

STAT = "cpu  {user} 0 {system} 5000 7 0 0 {steal} 0 0\ncpu0 1 2 3 4\n"


def test_read_proc_stat_sums_busy_and_steal():
    assert machine.read_proc_stat(STAT.format(user=100, system=50, steal=7)) == (150, 7)
    text = "cpu  10 1 2 900 3 4 5 6 0 0\n"  # user nice system idle iowait irq softirq steal
    assert machine.read_proc_stat(text) == (10 + 1 + 2 + 4 + 5, 6)  # idle/iowait are not busy
    with pytest.raises(ValueError, match="no aggregate"):
        machine.read_proc_stat("cpu0 1 2 3\n")
    real = machine.read_proc_stat()  # this machine (Linux): two non-negative counters
    assert real is None or (real[0] >= 0 and real[1] >= 0)


def test_load_probe_quiet_and_contended(fake_machine):
    fake = fake_machine
    probe = machine.LoadProbe(fake.readers).start()
    fake.run(wall=1.0, own=2.0, others=0.05)  # we used both cores; others 5% of one core
    quiet = probe.stop()
    assert quiet.others_cpu_s == pytest.approx(0.05) and quiet.contended is False
    assert quiet.resolution_s == pytest.approx(2 * 2 / 100)  # two ticks per CPU
    probe = machine.LoadProbe(fake.readers).start()
    fake.la = 2.5
    fake.run(wall=1.0, own=1.0, others=0.6)  # a neighbour took 0.6 of a core
    busy = probe.stop()
    assert busy.others_cores == pytest.approx(0.6) and busy.contended is True
    assert busy.loadavg_before == 1.0 and busy.loadavg_after == 2.5
    assert "CONTENDED" in busy.describe() and busy.as_dict()["contended"] is True
    assert machine.measured_loads()[-2:] == [quiet, busy]  # the ledger's default stamp reads these


def test_contended_rule_threshold_and_steal(fake_machine):
    """The rule: others' CPU > CONTENDED_SHARE of one core over the wall time + tick resolution."""
    fake = fake_machine
    limit = machine.CONTENDED_SHARE * 10.0 + 2 * 2 / 100
    probe = machine.LoadProbe(fake.readers).start()
    fake.run(wall=10.0, own=10.0, others=limit - 0.02)
    assert probe.stop().contended is False  # mutation: a rule without the share fails here
    probe = machine.LoadProbe(fake.readers).start()
    fake.run(wall=10.0, own=10.0, others=limit + 0.02)
    assert probe.stop().contended is True
    probe = machine.LoadProbe(fake.readers).start()
    fake.run(wall=10.0, own=10.0, others=0.0, steal=2.0)  # the hypervisor's other guests
    load = probe.stop()
    assert load.steal_s == pytest.approx(2.0) and load.contended is True


def test_load_unknown_without_proc_stat(fake_machine):
    fake = fake_machine
    fake.readers.proc_stat = lambda: None
    probe = machine.LoadProbe(fake.readers).start()
    fake.run(wall=1.0, own=1.0, others=5.0)
    load = probe.stop()
    assert load.contended is None and load.others_cores is None  # unknown, never "quiet"
    assert "load unknown" in load.describe()


def test_a_short_region_reads_no_impossible_cores(fake_machine):
    """A 41 us region in which one 10 ms tick of others' work lands: within the counter's
    resolution, not '243 cores' on a 2-core machine (the figure the old rate printed)."""
    fake = fake_machine
    probe = machine.LoadProbe(fake.readers).start()
    fake.run(wall=41e-6, own=0.0, others=0.01)
    load = probe.stop()
    assert load.others_cpu_s == pytest.approx(0.01) and load.contended is False
    assert load.others_cores is None and "within the counter's resolution" in load.describe()
    assert "243" not in load.describe() and load.as_dict()["others_cores"] is None


def test_the_probes_own_reading_is_not_counted_as_others(fake_machine):
    """Reading this process's CPU (psutil lists every process) costs about a millisecond of our
    own CPU after the value is taken: at neither end may it land in others' CPU time."""
    fake = fake_machine
    own = fake.readers.family_cpu_s

    def costly_read():
        value = own()
        fake.run(wall=0.001, own=0.001, others=0.0)  # the listing, after the value is taken
        return value

    fake.readers.family_cpu_s = costly_read
    probe = machine.LoadProbe(fake.readers).start()
    fake.run(wall=1.0, own=1.0, others=0.0)
    load = probe.stop()
    assert load.others_cpu_s == pytest.approx(0.0, abs=1e-9)
    assert load.wall_s == pytest.approx(1.001)  # the wall spans the counters' window
