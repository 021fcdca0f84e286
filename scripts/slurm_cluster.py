"""A one-node SLURM cluster in a temporary folder, from Debian's packages, for trying and
testing `arithrepro repro --executor slurm` on one machine.

    sudo python scripts/slurm_cluster.py install   # Debian's packages (apt-get), 1 minute
    sudo python scripts/slurm_cluster.py up        # prints the folder and `export SLURM_CONF=...`
    export SLURM_CONF=/tmp/arithrepro-slurm-XXXX/etc/slurm.conf
    arithrepro repro --executor slurm --slurm partition=debug train-looped
    sudo python scripts/slurm_cluster.py down /tmp/arithrepro-slurm-XXXX

It starts munged (as the munge user, on a socket of its own), MariaDB (its data in the folder),
slurmdbd, slurmctld and slurmd (one node: this machine's cores, partition `debug`), each in the
foreground as a child of this script's process, each on a free port, then waits until the node
is idle and `sacct` answers. submitit reads job states only through `sacct`, hence the
accounting database: without it every state reads UNKNOWN and a cancelled job never ends.
`down` (or `Cluster.stop()`) cancels every job, stops the job steps and the daemons by PID and
removes the folder. Nothing is written outside the folder; a SLURM or munge already running on
the machine is left alone. Runs as root (munged and slurmd need it); `up` keeps running until
interrupted, `up --detach` returns once the cluster is up and leaves the daemons running.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client", "slurmdbd", "mariadb-server")
PROGRAMS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sbatch", "sacct", "sinfo")
PARTITION = "debug"
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


class Unavailable(RuntimeError):
    """This machine cannot run the cluster; the message says why, in one line."""


def missing() -> str | None:
    """Why the cluster cannot start here (one line), or None."""
    if os.geteuid() != 0:
        return "needs root (munged runs as the munge user, slurmd as root)"
    absent = [p for p in PROGRAMS if not _which(p)]
    if absent:
        return (f"{', '.join(absent)} not installed (apt-get install --no-install-recommends "
                f"{' '.join(PACKAGES)})")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user (Debian's munge package makes it)"
    if not Path("/etc/munge/munge.key").is_file():
        return "no /etc/munge/munge.key (Debian's munge package makes it)"
    return None


def _alive(pid: int) -> bool:
    """Running, not a zombie that no parent reaps (a detached daemon's parent has gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _which(name: str) -> str | None:
    return shutil.which(name) or next((f"{d}/{name}" for d in SBIN
                                       if os.access(f"{d}/{name}", os.X_OK)), None)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Cluster:
    folder: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.folder / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment a SLURM client (sbatch, sacct, submitit) needs to reach this one."""
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *args: str, check: bool = True) -> str:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60,
                             env={**os.environ, **self.env})
        if check and out.returncode:
            raise RuntimeError(f"{' '.join(args)}: {(out.stderr or out.stdout).strip()}")
        return out.stdout

    def log(self, name: str) -> str:
        path = self.folder / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, timeout: float = 15.0) -> None:
        """Cancel every job, stop its steps, the daemons (newest first) by PID, remove the
        folder; whatever state they are in."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--partition", PARTITION, check=False)
        steps = _steps(self.folder)
        for name in reversed(list(self.procs)):
            _end(self.procs[name], timeout)
        for pid in steps + _steps(self.folder):
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.procs.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


def _end(proc: subprocess.Popen, timeout: float) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _steps(folder: Path) -> list[int]:
    """The slurmstepd processes of this cluster (they leave slurmd's process tree): those whose
    command line or working folder is under `folder`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "slurmstepd" not in cmd:
                continue
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if str(folder) in cmd or cwd.startswith(str(folder)):
            found.append(int(entry.name))
    return found


def start(folder: Path | None = None, cpus: int | None = None, timeout: float = 60.0) -> Cluster:
    """Bring the cluster up in `folder` (default: a new folder under the system's temporary
    one) and return it once its node is idle and accounting answers. Raises Unavailable where
    the machine cannot run it, RuntimeError (naming the daemon and its log's last line) where
    a daemon does not come up; nothing is left running either way."""
    why = missing()
    if why:
        raise Unavailable(why)
    folder = Path(folder or tempfile.mkdtemp(prefix="arithrepro-slurm-"))
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)   # munged, as its own user, reaches its socket folder through it
    cluster = Cluster(folder)
    try:
        _bring_up(cluster, cpus or os.cpu_count() or 1, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _bring_up(c: Cluster, cpus: int, timeout: float) -> None:
    f = c.folder
    for sub in ("etc", "log", "db", "ctld", "spool"):
        (f / sub).mkdir(exist_ok=True)
    munge = f / "munge"
    munge.mkdir(exist_ok=True)
    munge.chmod(0o755)   # clients reach the socket through it
    user = pwd.getpwnam("munge")
    os.chown(munge, user.pw_uid, user.pw_gid)
    sock = munge / "munge.socket"
    db_port, dbd_port, ctld_port, d_port = _port(), _port(), _port(), _port()
    host = socket.gethostname().split(".")[0]

    c.procs["munged"] = _spawn(c, "munged", [
        _which("munged"), "--foreground", f"--socket={sock}", f"--pid-file={munge}/munged.pid",
        f"--seed-file={munge}/seed", f"--log-file={munge}/munged.log"], user="munge")
    _wait(c, "munged", lambda: sock.exists(), timeout)

    # MariaDB without its grant tables: reachable only from this machine, on its own port
    c.procs["mariadbd"] = _spawn(c, "mariadbd", [
        _which("mariadbd"), "--no-defaults", f"--datadir={f / 'db'}", "--user=root",
        "--skip-grant-tables", f"--socket={f / 'db' / 'mysqld.sock'}", f"--port={db_port}",
        "--bind-address=127.0.0.1", f"--pid-file={f / 'db' / 'mysqld.pid'}",
        "--skip-log-bin", "--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M"])
    _wait(c, "mariadbd", lambda: _listening(db_port), timeout)

    auth = f"AuthType=auth/munge\nAuthInfo=socket={sock}\n"
    dbd = f / "etc" / "slurmdbd.conf"
    dbd.write_text(
        f"{auth}DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={dbd_port}\nSlurmUser=root\n"
        f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={db_port}\n"
        f"StorageUser=root\nStorageLoc=slurm_acct_db\nPidFile={f / 'slurmdbd.pid'}\n"
        f"LogFile={f / 'log' / 'slurmdbd.log'}\n")
    dbd.chmod(0o600)
    c.conf.write_text(
        f"ClusterName=arithrepro\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={ctld_port}\n"
        f"SlurmdPort={d_port}\nSlurmUser=root\nSlurmdUser=root\n{auth}CredType=cred/munge\n"
        f"StateSaveLocation={f / 'ctld'}\nSlurmdSpoolDir={f / 'spool'}\n"
        f"SlurmctldPidFile={f / 'slurmctld.pid'}\nSlurmdPidFile={f / 'slurmd.pid'}\n"
        f"SlurmctldLogFile={f / 'log' / 'slurmctld.log'}\n"
        f"SlurmdLogFile={f / 'log' / 'slurmd.log'}\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_Core\nMpiDefault=none\nReturnToService=2\nKillWait=5\n"
        "SchedulerType=sched/backfill\n"
        # the node as configured, --cpus above the cores included (jobs that mostly wait)
        "SlurmdParameters=config_overrides\n"
        # a trivial job's round trip from about 3 s to 1 s
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=100000\n"
        f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
        f"AccountingStoragePort={dbd_port}\nAccountingStoragePass={sock}\n"
        "JobAcctGatherType=jobacct_gather/none\nMailProg=/bin/true\n"
        "JobCompType=jobcomp/none\nMinJobAge=600\n"
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n"
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")

    c.procs["slurmdbd"] = _spawn(c, "slurmdbd", [_which("slurmdbd"), "-D"])
    _wait(c, "slurmdbd", lambda: _listening(dbd_port), timeout)
    c.procs["slurmctld"] = _spawn(c, "slurmctld", [_which("slurmctld"), "-D", "-c", "-i"])
    _wait(c, "slurmctld", lambda: _listening(ctld_port), timeout)
    c.procs["slurmd"] = _spawn(c, "slurmd", [_which("slurmd"), "-D", "-N", host])
    _wait(c, "slurmd", lambda: c.run("sinfo", "--noheader", "--format=%T",
                                     check=False).strip() == "idle", timeout)
    _wait(c, "slurmdbd", lambda: subprocess.run(
        ["sacct", "--noheader", "--starttime=now-1hour"], capture_output=True,
        env={**os.environ, **c.env}).returncode == 0, timeout)


def _spawn(c: Cluster, name: str, argv: list[str], user: str | None = None) -> subprocess.Popen:
    with open(c.folder / "log" / f"{name}.out", "ab") as log:
        # its own session: a Ctrl-C meant for a test or the script stops the daemons through
        # stop(), in order, not all at once
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **c.env},
                                cwd=c.folder, user=user, group=user)


def _wait(c: Cluster, name: str, ready, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if c.procs[name].poll() is not None:
            break
        if ready():
            return
        time.sleep(0.1)
    said = (c.log(name) or (c.folder / "log" / f"{name}.out").read_text(errors="replace"))
    last = next((line for line in reversed(said.splitlines()) if line.strip()), "no log")
    state = f"exited {c.procs[name].returncode}" if c.procs[name].poll() is not None \
        else f"not ready after {timeout:.0f} s"
    raise RuntimeError(f"{name} {state}: {last.strip()}")


def install() -> int:
    """Debian's packages, without their recommendations (their scripts start no daemon here);
    the package lists fetched only where the first try finds none."""
    if not shutil.which("apt-get") or os.geteuid() != 0:
        print("SLURM's packages not installed: needs root and apt-get", file=sys.stderr)
        return 1
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    t0 = time.perf_counter()
    for attempt in (1, 2):
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode == 0:
            print(f"SLURM's packages installed in {time.perf_counter() - t0:.0f} s "
                  f"({subprocess.run([_which('slurmctld'), '-V'], capture_output=True, text=True).stdout.strip()})")
            return 0
        if attempt == 1:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env)
    last = (out.stderr.strip().splitlines() or ["apt-get failed"])[-1]
    print(f"SLURM's packages not installed: {last}", file=sys.stderr)
    return 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install", help="install Debian's packages (apt-get, as root)")
    up = sub.add_parser("up", help="start a cluster; stays until interrupted unless --detach")
    up.add_argument("folder", nargs="?", type=Path)
    up.add_argument("--cpus", type=int, default=None)
    up.add_argument("--detach", action="store_true")
    down = sub.add_parser("down", help="stop a detached cluster and remove its folder")
    down.add_argument("folder", type=Path)
    args = ap.parse_args()
    if args.cmd == "install":
        return install()
    if args.cmd == "down":
        return _down(args.folder)
    t0 = time.perf_counter()
    try:
        c = start(args.folder, args.cpus)
    except (Unavailable, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    (c.folder / "pids").write_text("".join(f"{n} {p.pid}\n" for n, p in c.procs.items()))
    print(f"SLURM is up in {time.perf_counter() - t0:.1f} s: {c.folder}\n"
          f"export SLURM_CONF={c.conf}")
    if args.detach:
        return 0
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    c.stop()
    return 0


def _down(folder: Path) -> int:
    pids = folder / "pids"
    if not pids.is_file():
        print(f"error: {pids}: not a cluster folder `up --detach` made", file=sys.stderr)
        return 1
    subprocess.run(["scancel", "--partition", PARTITION], capture_output=True,
                   env={**os.environ, "SLURM_CONF": str(folder / "etc" / "slurm.conf")})
    steps = _steps(folder)
    for line in reversed(pids.read_text().splitlines()):
        pid = int(line.split()[1])
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + wait
            while time.monotonic() < end and _alive(pid):
                time.sleep(0.1)
    for pid in steps + _steps(folder):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
