"""One writer per run dir: an exclusive lock, held for a whole session, that names its holder.

The trainer (`python -m sacbench.train`) and the pipeline's external-command wrapper
(`python -m sacbench.run_command`) take it before anything in the run dir changes and hold it
until they exit. A second process asked for the same run dir stops at once with
`RunDirBusy`, naming the holder (host, pid, since when), and changes nothing.

The lock is the file LOCK_FILE_NAME inside the run dir, locked with flock(2). The operating
system drops the lock when its process dies, however it dies (SIGKILL, out of memory), so a
lock left by a dead process never blocks a rerun; a process that finds the file but gets the
lock simply takes it over. Linux emulates flock on NFS with POSIX byte-range locks, which go
through the NFS lock manager, so it holds across the nodes of a cluster. The holder writes a
JSON record of itself into the file (HolderRecord) for the refusals to name, and refreshes its
modification time every HEARTBEAT_SECONDS. A lock whose holder's node died stays held on NFS
until the server drops it (about 90 s for NFSv4; for NFSv3, not before the node comes back), so
a flock held by another host whose record has not been refreshed for LEASE_SECONDS is taken as
its dead holder's: its lock file is moved aside (a lock belongs to the file, not to its name)
and a fresh one is locked. A holder on another host gets the same lease as in record mode.

Where the file system refuses locks (ENOLCK, EOPNOTSUPP, ENOSYS, EINVAL), or where its locks
are known to be node-local only (an NFS mount with `local_lock=flock|all`, e.g. `-o nolock`;
Lustre mounted with `localflock`; BeeGFS, whose locks are node-local by default), the record
itself is the lock: it is created with O_EXCL, and a record found in place is judged by its
holder:
- on this host (same hostname and boot): held while its pid is alive and started when the
  record says (a reused pid is not the holder);
- on another host: held while the record is younger than LEASE_SECONDS (10 minutes). The
  holder refreshes the record's modification time every HEARTBEAT_SECONDS (1 minute) from a
  background thread, so a live holder's record never ages past a minute or two; a holder that
  died on another node blocks a rerun for at most the lease.
A record judged dead is moved out of the way and the lock is taken.

A Slurm job requeued after a node failure can find its own earlier run's lock still held: the
dead node's NFS lock lingers until the server reclaims it (about 90 s for NFSv4, until the node
comes back for NFSv3), and a record's lease is 10 minutes. Slurm runs one incarnation of a job
at a time and requeues it only once it counts the earlier one ended, so a holder that recorded
the same job with a lower SLURM_RESTART_COUNT is gone: its lock file is moved aside and a fresh
one is taken at once, in either mode, without waiting for the lease.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

LOCK_FILE_NAME = ".sacbench.lock"
# Record mode (no usable OS locks): a holder on another host is presumed alive while its record
# is younger than this; the holder refreshes it every HEARTBEAT_SECONDS.
LEASE_SECONDS = 600.0
HEARTBEAT_SECONDS = 60.0
# errno values with which a file system says that it does not do locks.
NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})
_ATTEMPTS = 20  # races with a releasing or dying holder are retried this often
# How long a process that finds a run dir locked a moment ago waits for its holder's record.
RECORD_WAIT_SECONDS = 0.2


class RunDirLockError(RuntimeError):
    """A run dir that cannot be locked (not a folder, not writable); the message says why."""


class RunDirBusy(RunDirLockError):
    """Another live process holds the run dir; the message names it."""


# ---- who holds it ------------------------------------------------------------------------------


def boot_id() -> str | None:
    """This boot of this machine (Linux); a pid means nothing across a reboot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def process_start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (Linux), None if it does not exist.

    With the pid it identifies a process: a pid reused by a later process has another start."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces; starttime is field 22.
    return int(stat.rpartition(")")[2].split()[19])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def slurm_incarnation() -> dict[str, Any] | None:
    """This process's Slurm job (cluster, job id) and how often Slurm has requeued it, or None
    outside a Slurm job."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    try:
        restart_count = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        restart_count = 0
    return {
        "cluster": os.environ.get("SLURM_CLUSTER_NAME"),
        "job_id": job_id,
        "restart_count": restart_count,
    }


def earlier_incarnation_of_this_job(record: dict[str, Any] | None) -> bool:
    """Whether `record`'s holder is this Slurm job before a requeue, hence gone (see the
    module's docstring)."""
    mine = slurm_incarnation()
    theirs = record.get("slurm") if record else None
    if mine is None or not isinstance(theirs, dict):
        return False
    same_job = (theirs.get("cluster"), theirs.get("job_id")) == (mine["cluster"], mine["job_id"])
    earlier = theirs.get("restart_count")
    return same_job and isinstance(earlier, int) and earlier < mine["restart_count"]


def holder_record(program: str) -> dict[str, Any]:
    """This process as a lock holder."""
    now = time.time()
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "since": dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="seconds"),
        "since_unix_time": now,
        "program": program,
        "boot_id": boot_id(),
        "process_start_ticks": process_start_ticks(os.getpid()),
        "slurm": slurm_incarnation(),
    }


def describe_holder(record: dict[str, Any] | None) -> str:
    if not record:
        return "a process that has not recorded itself yet"
    slurm = record.get("slurm")
    job = f", Slurm job {slurm.get('job_id')}" if isinstance(slurm, dict) else ""
    return (
        f"{record.get('program', 'a sacbench process')} (pid {record.get('pid')} on host "
        f"{record.get('host')}{job}, since {record.get('since')})"
    )


def _parse_record(data: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def holder_on_a_silent_host(record: dict[str, Any] | None, *, age_seconds: float) -> bool:
    """Whether a flock's holder is on another host and has not refreshed its record for
    LEASE_SECONDS: its node died and the NFS server still holds its lock. A holder on this
    host is judged by the kernel's lock alone."""
    if record is None or record.get("host") == socket.gethostname():
        return False
    return age_seconds >= LEASE_SECONDS


def holder_is_alive(record: dict[str, Any] | None, *, age_seconds: float) -> bool:
    """Record mode's judgement of a record found in place (see the module's docstring)."""
    if record is None:  # being written, or garbled: give it the lease
        return age_seconds < LEASE_SECONDS
    same_host = record.get("host") == socket.gethostname()
    if same_host and record.get("boot_id") is not None and record.get("boot_id") != boot_id():
        return False  # this machine rebooted since
    if not same_host:
        return age_seconds < LEASE_SECONDS
    pid = record.get("pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    started = record.get("process_start_ticks")
    return started is None or process_start_ticks(pid) == started


# ---- which file systems lock across hosts ------------------------------------------------------


def node_local_locks(path: Path, mountinfo: str | None = None) -> str | None:
    """Why flock on `path`'s file system may lock this node only (then the record is the lock),
    or None. Reads /proc/self/mountinfo unless given its text."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    target = str(path.resolve())
    best: tuple[int, str, str] | None = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 6:
            continue
        mount_point = fields[4].replace("\\040", " ")
        _, _, after = line.partition(" - ")
        fs_type, _, options = (after.split() + ["", "", ""])[:3]
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and (best is None or len(mount_point) > best[0]):
            best = (len(mount_point), fs_type, f"{fields[5]},{options}")
    if best is None:
        return None
    _, fs_type, options = best
    flags = set(options.split(","))
    local = sorted(flags & {"local_lock=all", "local_lock=flock"})
    if fs_type.startswith("nfs") and local:
        return f"an NFS mount with node-local locks ({', '.join(local)})"
    if fs_type == "lustre" and "localflock" in flags:
        return "a Lustre mount with localflock"
    if fs_type == "beegfs":
        return "BeeGFS (its locks are node-local unless tuneUseGlobalFileLocks is set)"
    return None


# ---- the lock ----------------------------------------------------------------------------------


class RunDirLock:
    """The lock of one run dir (see the module's docstring). Use as a context manager, or
    acquire() and release(); `moved(old_dir)` after the run dir was renamed to `old_dir` and
    made anew, to lock the new one.

    `created_dir`: whether acquiring made the folder; release() removes it again when nothing
    but the lock file was put in it, so a run refused later leaves no empty folder behind.
    `folder`: what the errors call the folder (another folder than a run dir can be locked)."""

    def __init__(self, run_dir: Path, *, program: str, folder: str = "run dir") -> None:
        self.run_dir = Path(run_dir)
        self.folder = folder
        self.path = self.run_dir / LOCK_FILE_NAME
        self.program = program
        self.record = holder_record(program)
        self.mode: str | None = None  # "flock" or "record" once held
        self.created_dir = False
        self._fd: int | None = None
        self._heartbeat: threading.Event | None = None
        self._waited_for_record = False
        # The holder whose lock was taken over (known or presumed dead), and why.
        self.taken_over_from: str | None = None

    def __enter__(self) -> RunDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        self._make_dir()
        reason = node_local_locks(self.run_dir)
        for _ in range(_ATTEMPTS):
            done = self._try_record_mode() if reason else self._try_flock()
            if done is None:  # the file system refuses locks: the record is the lock
                reason = "the file system refuses locks"
                continue
            if done:
                self._start_heartbeat()
                return
        raise RunDirBusy(f"{self.run_dir}: could not take {self.path} (its holder kept changing)")

    def _make_dir(self) -> None:
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise RunDirLockError(f"{self.folder} {self.run_dir} is a file, not a folder")
        try:
            self.run_dir.mkdir(parents=True)
            self.created_dir = True
        except FileExistsError:
            if not self.run_dir.is_dir():
                message = f"{self.folder} {self.run_dir} is a file, not a folder"
                raise RunDirLockError(message) from None
        except OSError as error:
            raise RunDirLockError(_cannot_write(self.folder, self.run_dir, error)) from None

    def _open(self, flags: int) -> int:
        try:
            return os.open(self.path, flags, 0o666)
        except FileExistsError:
            raise
        except OSError as error:
            raise RunDirLockError(_cannot_write(self.folder, self.run_dir, error)) from None

    def _try_flock(self) -> bool | None:
        """True: held; False: raced with a releasing holder, try again; None: no OS locks."""
        created = True
        try:
            descriptor = self._open(os.O_RDWR | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            created = False
            try:
                descriptor = os.open(self.path, os.O_RDWR)
            except FileNotFoundError:  # its holder released it as we looked
                return False
            except OSError as error:
                raise RunDirLockError(_cannot_write(self.folder, self.run_dir, error)) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _parse_record(os.pread(descriptor, 1 << 16, 0))
            judged = os.fstat(descriptor)
            age = time.time() - judged.st_mtime
            os.close(descriptor)
            if judged.st_size == 0 and not self._waited_for_record:
                # Locked a moment ago, its record not written yet: wait for it once, so that
                # the refusal can name the holder.
                self._waited_for_record = True
                time.sleep(RECORD_WAIT_SECONDS)
                return False
            if earlier_incarnation_of_this_job(holder):
                why = "this Slurm job before Slurm requeued it"
            elif holder_on_a_silent_host(holder, age_seconds=age):
                why = f"its record was last refreshed {age / 60:.0f} minutes ago"
            else:
                raise self._busy(holder) from None
            self._take_over(holder, why, judged=judged)
            return False
        except OSError as error:
            os.close(descriptor)
            if error.errno in NO_LOCKS:
                if created:  # this probe's own empty file, which record mode would take as a
                    # record being written and wait on: it makes its own
                    self.path.unlink(missing_ok=True)
                return None
            raise RunDirLockError(f"cannot lock {self.path}: {error.strerror}") from None
        if not _still_named(descriptor, self.path):  # the holder removed it as we opened it
            os.close(descriptor)
            return False
        self._fd, self.mode = descriptor, "flock"
        self._write_record()
        return True

    def _try_record_mode(self) -> bool:
        try:
            descriptor = self._open(os.O_RDWR | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            self._clear_dead_record()
            return False
        self._fd, self.mode = descriptor, "record"
        self._write_record()
        return True

    def _clear_dead_record(self) -> None:
        """A record in place: refuse if its holder lives, else move it aside (atomically, so
        that of two processes clearing it only one does) and drop it."""
        try:
            data, age = self.path.read_bytes(), time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return
        record = _parse_record(data)
        if earlier_incarnation_of_this_job(record):
            self._take_over(record, "this Slurm job before Slurm requeued it")
            return
        if holder_is_alive(record, age_seconds=age):
            raise self._busy(record)
        stale = self.path.with_name(f"{LOCK_FILE_NAME}.dead-{os.getpid()}")
        try:
            os.rename(self.path, stale)
        except FileNotFoundError:
            return
        if stale.read_bytes() != data:  # another process's fresh record: put it back
            with contextlib.suppress(FileExistsError):
                os.link(stale, self.path)
        stale.unlink(missing_ok=True)

    def _take_over(
        self, record: dict[str, Any] | None, why: str, *, judged: os.stat_result | None = None
    ) -> None:
        """Move aside the lock file of a holder known or presumed dead; the caller then takes a
        fresh one. Its lock, if its node still holds one, stays with the old file. `judged`:
        the file that was judged; if another process put a fresh one in its place meanwhile
        (it took over first), that one is put back, and the caller tries again."""
        aside = self.path.with_name(f"{LOCK_FILE_NAME}.dead-{os.getpid()}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        moved = os.stat(aside)
        if judged is not None and (moved.st_dev, moved.st_ino) != (judged.st_dev, judged.st_ino):
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
            aside.unlink()
            return
        aside.unlink()
        self.taken_over_from = f"{describe_holder(record)}: {why}"

    def _write_record(self) -> None:
        assert self._fd is not None
        data = (json.dumps(self.record | {"lock": self.mode}, indent=1) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def _busy(self, holder: dict[str, Any] | None) -> RunDirBusy:
        return RunDirBusy(
            f"run dir {self.run_dir} is in use by {describe_holder(holder)}; one process "
            f"trains a run dir at a time, so this one stopped and changed nothing (lock file "
            f"{self.path}). Wait for it to end, or stop it, then run this again"
        )

    def _start_heartbeat(self) -> None:
        stop = threading.Event()
        path = self.path

        def beat() -> None:
            while not stop.wait(HEARTBEAT_SECONDS):
                with contextlib.suppress(OSError):
                    os.utime(path)

        threading.Thread(target=beat, name="sacbench-lock-heartbeat", daemon=True).start()
        self._heartbeat = stop

    def moved(self, old_dir: Path) -> None:
        """The run dir was renamed to `old_dir` (with the lock file inside) and made anew:
        lock the new one, then drop the old lock file."""
        old_fd, old_path, old_heartbeat = self._fd, Path(old_dir) / LOCK_FILE_NAME, self._heartbeat
        self._fd, self._heartbeat, self.created_dir = None, None, False
        try:
            self.acquire()
        finally:
            if old_heartbeat is not None:
                old_heartbeat.set()
            with contextlib.suppress(OSError):
                old_path.unlink()
            if old_fd is not None:
                os.close(old_fd)

    def release(self) -> None:
        if self._fd is None:
            return
        if self._heartbeat is not None:
            self._heartbeat.set()
            self._heartbeat = None
        if _still_named(self._fd, self.path):
            with contextlib.suppress(OSError):
                self.path.unlink()  # before the lock goes: no one can lock a file on its way out
        os.close(self._fd)
        self._fd = None
        if self.created_dir:
            with contextlib.suppress(OSError):
                self.run_dir.rmdir()  # only when empty: a refused run leaves no folder


def _still_named(descriptor: int, path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(descriptor)
    return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)


def _cannot_write(folder: str, run_dir: Path, error: OSError) -> str:
    if error.errno == errno.EROFS:
        why = "it is on a read-only file system"
    elif error.errno in (errno.EACCES, errno.EPERM):
        why = "permission denied"
    elif error.errno == errno.ENOTDIR:
        why = "a part of its path is a file, not a folder"
    elif error.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "its device is full"
    else:
        why = error.strerror or str(error)
    return f"cannot write into {folder} {run_dir}: {why}"
