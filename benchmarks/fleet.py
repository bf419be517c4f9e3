"""Fleet audit throughput: `--jobs 1`, the local engine on every core, and a 2-worker Dask LocalCluster, in one run.

    python benchmarks/fleet.py [--sessions N] [--runs K] [--no-dask] [--no-browser]

Fleets: the real corpus (/work/shared/corpus/real or $TOOLREPLAY_CORPUS, when present) and N generated
sessions (default 20,000; 2 to 20 calls each, from `generate.py` with one seed per session) written once
to benchmarks/data/. Each configuration runs `python -m toolreplay audit FLEET --format json -o
/dev/null` as a child process, K times, the configurations taking turns (in reverse order every other
run); sessions/s come from the best wall time of the K runs (the median is printed too). The targets are
judged on the median of the K ratios of runs made side by side, which a slow spell of a shared machine
moves far less than a ratio of two best times picked from different moments (printed too). The driver's
peak memory comes from its max RSS. The Dask workers audit the small fleet once before anything is
measured (their first task imports toolreplay). A tenth of the generated fleet is measured too, to show
that the driver's memory does not grow with the number of sessions. With a browser, the time headless
Chromium takes to load the HTML pages of the big fleet and of a 200,000-call session (minus the time it
takes on an empty page) is printed as well.

With the generated fleet, the same pure-Python loop runs in one process and split between two, taking turns
with the audits: what two processes of Python get from this machine in those minutes, the reference for the
local engine's speed-up (on these shared 2-core machines single pairs have ranged from 1.15x to 2.48x).

Two Dask clusters run: one with Dask's stock settings, and one with the settings docs/audit.md gives for an
audit cluster (AUDIT_SETTINGS: the workers' statistical profiler off and their event-loop health check every
500 ms instead of every 20 ms; the 150 wake-ups a second those make cost a worker's task 10 to 20% of its
CPU). Each runs in a process group of its own, stopped (SIGSTOP) except while its configuration runs: idle,
a cluster takes about a seventh of a core, which the other configurations' processes would lose.

`start s` is the best time of the same configuration on one 4-call session: starting Python and the
command (and, for Dask, importing it and reaching the scheduler). The corpus is about a second of work,
so that start-up decides its ratios; they are printed, not judged.

Targets (issue 12), judged on the generated fleet: local engine >= 1.7x the sessions/s of --jobs 1;
Dask's time within 1.3x of the local engine's (with the audit settings; the stock cluster's ratio is printed
beside it); driver peak memory on N sessions within 10 MB of that on N/10. Exit 1 on a miss.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import generate  # noqa: E402
from run import _run_once  # noqa: E402

CORPUS = os.environ.get("TOOLREPLAY_CORPUS", os.path.join(os.path.dirname(ROOT), "shared", "corpus", "real"))
LOCAL_TARGET = 1.7
DASK_TARGET = 1.3
MEMORY_SLACK_MB = 10.0
BIG_SESSION = 200_000
ONE_SESSION = os.path.join(ROOT, "samples", "session-clean.jsonl")  # for the start-up time: 4 calls


def generated_fleet(sessions: int) -> str:
    """A folder of `sessions` generated sessions (2 to 20 calls), made once."""
    folder = os.path.join(DATA, f"fleet-{sessions}")
    if os.path.isdir(folder):
        return folder
    sys.stderr.write(f"generating {sessions:,} sessions into {os.path.relpath(folder, ROOT)} ...\n")
    partial = folder + ".tmp"
    shutil.rmtree(partial, ignore_errors=True)
    lengths = random.Random(generate.SEED)
    for number in range(sessions):
        sub = os.path.join(partial, f"{number // 1000:03d}")
        os.makedirs(sub, exist_ok=True)
        lines = list(generate.generate_lines(lengths.randint(2, 20), seed=number))
        with open(os.path.join(sub, f"session-{number:06d}.jsonl"), "w", encoding="ascii") as handle:
            handle.write("\n".join(lines) + "\n")
    os.replace(partial, folder)
    return folder


def count_sessions(folder: str) -> int:
    return sum(name.endswith(".jsonl") for _, _, files in os.walk(folder) for name in files)


Sample = tuple[float, float, float, int, str]  # wall s, CPU s, peak MB, exit code, last stderr line


def audit_argv(folder: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "toolreplay", "audit", folder, "--format", "json", "-o", os.devnull,
            "--allow-unreadable", *extra]


def checked(sample: Sample) -> Sample:
    _seconds, _cpu, _peak, code, error = sample
    if code not in (0, 1) or error:
        raise SystemExit(f"audit failed (exit {code}): {error}")
    return sample


def peak_memory(folder: str) -> float:
    """The driver's peak MB of one local-engine audit of `folder`."""
    return checked(_run_once(audit_argv(folder, "--jobs", "2")))[2]


CLUSTER = """
import sys
from distributed import LocalCluster
with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster:
    print(cluster.scheduler_address, flush=True)
    sys.stdin.read()  # until the benchmark closes the pipe
"""


# What docs/audit.md recommends for the scheduler and workers of an audit cluster, as environment variables.
AUDIT_SETTINGS = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
                  "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "500ms"}
JOBS_1, LOCAL, STOCK, FOR_AUDITS = "--jobs 1", "local, 2 cores", "dask, stock", "dask, for audits"
ROWS = [JOBS_1, LOCAL, STOCK, FOR_AUDITS]  # the table's order, not the order of the turns


class Cluster:
    """A 2-worker Dask LocalCluster (worker processes) with `settings` in its environment, in a process group of its
    own, which is stopped (SIGSTOP) except while its configuration runs: an idle cluster takes about a seventh of a
    core (heartbeats, monitors), which would otherwise be taken from the other configurations' processes."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", CLUSTER], cwd=ROOT,
                                        env=dict(os.environ, PYTHONPATH=ROOT,  # the scheduler unpickles tasks
                                                 **settings),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        start_new_session=True)
        assert self.process.stdout is not None
        self.address = self.process.stdout.readline().strip()
        if not self.address:
            raise SystemExit("the Dask LocalCluster did not start")

    def run(self, argv: list[str]) -> Sample:
        os.killpg(self.process.pid, signal.SIGCONT)
        time.sleep(0.5)  # its timers catch up before the clock starts
        try:
            return _run_once(argv)
        finally:
            os.killpg(self.process.pid, signal.SIGSTOP)

    def close(self) -> None:
        os.killpg(self.process.pid, signal.SIGCONT)
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


Plan = list[tuple[str, list[str], Callable[[list[str]], Sample]]]  # label, the command, how to run it


def engine_plan(folder: str, clusters: dict[str, Cluster]) -> Plan:
    """(label, the command, how to run it) for each engine, in the order they take turns: the two runs of each judged
    ratio (jobs 1 and local, local and Dask with the audit settings) next to each other, either way round."""
    def dask(label: str) -> Plan:
        cluster = clusters.get(label)
        if cluster is None:
            return []
        return [(label, audit_argv(folder, "--engine", "dask", "--scheduler", cluster.address), cluster.run)]

    return [*dask(STOCK),
            (JOBS_1, audit_argv(folder, "--jobs", "1"), _run_once),
            (LOCAL, audit_argv(folder, "--jobs", "2"), _run_once),
            *dask(FOR_AUDITS)]


# The machine's own reference: the same pure-Python loop, BURN_LOOPS turns in all, in one process or split
# between two (forked) processes. Nothing of toolreplay: what two processes of Python get here, this minute.
BURN_LOOPS = 60_000_000  # about 7 s in one process, as long as the local engine's run
BURN = """
import os, sys
loops, processes = int(sys.argv[1]), int(sys.argv[2])
children = []
for _ in range(processes - 1):
    pid = os.fork()
    if pid == 0:
        children = None
        break
    children.append(pid)
total = 0
for turn in range(loops // processes):
    total += turn * turn
if children is None:
    os._exit(0)
for child in children:
    os.waitpid(child, 0)
"""
ONE_PROCESS, TWO_PROCESSES = "python, 1 process", "python, 2 processes"
CONTROL = {ONE_PROCESS: "1", TWO_PROCESSES: "2"}


def timed_runs(name: str, folder: str, runs: int, clusters: dict[str, Cluster],
               control: bool = False) -> dict[str, list[Sample]]:
    """Every configuration `runs` times on `folder` (and the machine's control loops when `control`), taking turns
    (in reverse order every other run, so a slow spell of this shared machine hits them all alike)."""
    plan = engine_plan(folder, clusters)
    if control:
        plan += [(label, [sys.executable, "-c", BURN, str(BURN_LOOPS), processes], _run_once)
                 for label, processes in CONTROL.items()]
    samples: dict[str, list[Sample]] = {label: [] for label, _, _ in plan}
    for run in range(1, runs + 1):
        for label, argv, run_once in plan if run % 2 else plan[::-1]:
            sys.stderr.write(f"{name}: run {run}/{runs}: {label} ...\n")
            samples[label].append(checked(run_once(argv)))
    return samples


def measure_fleet(name: str, folder: str, runs: int, clusters: dict[str, Cluster], startup: dict[str, float],
                  judged: bool) -> tuple[list[str], bool]:
    """Best and median wall seconds, best CPU seconds (driver and its worker processes; not Dask's workers),
    highest driver peak MB; the ratios of the runs made side by side, judged against the targets when `judged`."""
    sessions = count_sessions(folder)
    samples = timed_runs(name, folder, runs, clusters, control=judged)
    seconds = {label: [s[0] for s in kept] for label, kept in samples.items()}
    for label in CONTROL:  # not an engine: no row in the table, only its ratio below
        samples.pop(label, None)
    best = {label: min(times) for label, times in seconds.items()}
    lines = [f"{name}: {sessions:,} sessions, {runs} runs of each, taking turns\n",
             f"  {'engine':<16} {'best s':>7} {'median s':>9} {'start s':>8} {'sessions/s':>11} {'vs jobs 1':>10} "
             f"{'cpu s':>7} {'driver MB':>10}\n"]
    for label, kept in sorted(samples.items(), key=lambda item: ROWS.index(item[0])):
        lines.append(f"  {label:<16} {best[label]:>7.2f} {statistics.median(seconds[label]):>9.2f} "
                     f"{startup[label]:>8.2f} {sessions / best[label]:>11.0f} {best[JOBS_1] / best[label]:>9.2f}x "
                     f"{min(s[1] for s in kept):>7.2f} {max(s[2] for s in kept):>10.1f}\n")

    def ratio_line(title: str, numerator: str, denominator: str, target: str | None = None,
                   ok: Callable[[float], bool] = lambda _: True) -> bool:
        """The ratio of two configurations in each run (made minutes apart at most), judged on their median."""
        paired = sorted(a / b for a, b in zip(seconds[numerator], seconds[denominator], strict=True))
        middle = statistics.median(paired)
        verdict = ("pass" if ok(middle) else "miss") if judged else "not judged (start-up bound)"
        spread = (f"median of the runs' ratios, {paired[0]:.2f} to {paired[-1]:.2f}; "
                  f"{best[numerator] / best[denominator]:.2f} best to best")
        lines.append(f"  {title}: {middle:.2f} ({spread})" + (f" target {target}: {verdict}" if target else "") + "\n")
        return ok(middle) or not judged

    if judged:  # the control loops ran: what two processes of Python got here in these minutes
        ratio_line("this machine's own speed-up, a pure-Python loop in 2 processes", ONE_PROCESS, TWO_PROCESSES)
    passed = ratio_line("local speed-up over jobs 1", JOBS_1, LOCAL, f">= {LOCAL_TARGET}x",
                        lambda ratio: ratio >= LOCAL_TARGET)
    if STOCK in clusters:
        ratio_line("dask time / local time, stock settings (not judged)", STOCK, LOCAL)
    if FOR_AUDITS in clusters:
        passed = ratio_line("dask time / local time, audit settings", FOR_AUDITS, LOCAL,
                            f"<= {DASK_TARGET}", lambda ratio: ratio <= DASK_TARGET) and passed
    return lines, passed


def browser_load(chromium: str, page: str) -> float:
    with tempfile.TemporaryDirectory() as profile:
        start = time.perf_counter()
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", "--dump-dom", f"file://{page}"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=300)
        return time.perf_counter() - start


def measure_pages(fleet: str) -> list[str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return ["pages: chromium not installed, not measured\n"]
    session = os.path.join(DATA, f"session-{BIG_SESSION}.jsonl")
    if not os.path.exists(session):
        sys.stderr.write(f"generating {os.path.relpath(session, ROOT)} ...\n")
        generate.write_session(BIG_SESSION, session)
    env = dict(os.environ, PYTHONPATH=ROOT)
    lines = ["pages: seconds for headless Chromium to load and lay out (minus an empty page's time)\n"]
    with tempfile.TemporaryDirectory() as folder:
        empty = os.path.join(folder, "empty.html")
        with open(empty, "w", encoding="ascii") as handle:
            handle.write("<!DOCTYPE html><title>empty</title>")
        fleet_page, session_page = os.path.join(folder, "fleet.html"), os.path.join(folder, "session.html")
        subprocess.run([sys.executable, "-m", "toolreplay", "audit", fleet, "--format", "html", "-o", fleet_page],
                       env=env, check=False)
        with open(session_page, "w", encoding="utf-8") as handle:
            subprocess.run([sys.executable, "-m", "toolreplay", "replay", session, "--format", "html"], env=env,
                           stdout=handle, check=False)
        baseline = min(browser_load(chromium, empty) for _ in range(2))
        for label, page in ((f"fleet of {count_sessions(fleet):,} sessions", fleet_page),
                            (f"session of {BIG_SESSION:,} calls", session_page)):
            seconds = min(browser_load(chromium, page) for _ in range(2)) - baseline
            lines.append(f"  {label:<28} {os.path.getsize(page) / 1e6:>6.1f} MB {max(seconds, 0):>6.2f} s\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20_000, help="generated sessions (default 20,000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per configuration (best kept, median shown)")
    parser.add_argument("--no-dask", action="store_true", help="skip the Dask LocalCluster")
    parser.add_argument("--no-browser", action="store_true", help="skip the page load times")
    args = parser.parse_args(argv)
    os.makedirs(DATA, exist_ok=True)
    big = generated_fleet(args.sessions)
    small = generated_fleet(args.sessions // 10)
    clusters: dict[str, Cluster] = {}
    ok = True
    out: list[str] = []
    try:
        if not args.no_dask:
            if importlib.util.find_spec("distributed") is None:
                sys.stderr.write("distributed is not installed: the Dask engine is not measured\n")
            else:
                clusters[STOCK] = Cluster({})  # one at a time: the finally below closes what has started
                clusters[FOR_AUDITS] = Cluster(AUDIT_SETTINGS)
        for cluster in clusters.values():  # the workers' first task imports toolreplay: not what is measured
            checked(cluster.run(audit_argv(small, "--engine", "dask", "--scheduler", cluster.address)))
        startup = {label: min(s[0] for s in kept)
                   for label, kept in timed_runs("start-up", ONE_SESSION, args.runs, clusters).items()}
        fleets = [("corpus", CORPUS, False)] if os.path.isdir(CORPUS) else []
        fleets.append(("generated", big, True))
        for name, folder, judged in fleets:
            lines, fleet_ok = measure_fleet(name, folder, args.runs, clusters, startup, judged)
            out += lines
            ok = ok and fleet_ok
        small_peak = peak_memory(small)
        big_peak = peak_memory(big)
        memory_ok = big_peak - small_peak <= MEMORY_SLACK_MB
        out.append(f"driver peak memory, local engine: {small_peak:.1f} MB on {count_sessions(small):,} sessions, "
                   f"{big_peak:.1f} MB on {count_sessions(big):,} (target: within {MEMORY_SLACK_MB:.0f} MB): "
                   f"{'pass' if memory_ok else 'miss'}\n")
        ok = ok and memory_ok
    finally:
        for cluster in clusters.values():
            cluster.close()
    if not args.no_browser:
        out += measure_pages(big)
    load = os.getloadavg()
    out.append(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores\n")
    sys.stdout.write("".join(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
