"""A unit forked from a process that imported the stage code once, instead of a fresh interpreter.

A fresh `python -m shard_pipeline.worker.task ...` pays the imports (pyarrow, numpy, the stage
module: ~0.35 CPU-s a unit, bench/RESULTS.md) every time; a group (worker/group.py) imports them once
(`preload`) and forks each unit (`fork_unit`), which then runs the same task main with the same
argv, log, environment, exit status and signal dispositions as the fresh process would. A line
naming another interpreter or other PYTHON* settings, or HPLT_SHARD_FORK_UNITS=0, is started fresh.
"""
from __future__ import annotations

import os
import runpy
import signal
import sys
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence


FORK_ENV = "HPLT_SHARD_FORK_UNITS"  # "0": start every unit as a fresh interpreter, as before forking


def forkable(argv: Sequence[str], env: dict[str, str] | None) -> bool:
    """True when `argv` is the task line run by this very interpreter, with this process's Python settings:
    then a fork of this process (which has imported the stage code) runs the same main as that line would."""
    from shard_pipeline.worker.taskcmd import task_args

    if os.environ.get(FORK_ENV, "1") == "0" or task_args(argv) is None:
        return False
    if os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
        return False
    return python_settings(os.environ if env is None else env) == python_settings(os.environ)


def python_settings(env: Mapping[str, str]) -> dict[str, str]:
    """The PYTHON* variables of `env` that could change the code a unit runs. A PYTHONPATH that only
    puts this checkout first (executors.task_env: a task need not find an installed package) is
    the code this process imported already, so it counts as the path without it."""
    from shard_pipeline.paths import checkout_root

    found = {k: v for k, v in env.items() if k.startswith("PYTHON")}
    root = checkout_root()
    path = found.get("PYTHONPATH")
    if root is not None and path is not None:
        entries = path.split(os.pathsep)
        while entries and entries[0] == str(root):  # once by the executor, once more if the user put it there too
            entries.pop(0)
        if entries:
            found["PYTHONPATH"] = os.pathsep.join(entries)
        else:
            del found["PYTHONPATH"]
    return found


def preload(argvs: Sequence[Sequence[str]], env: dict[str, str] | None) -> None:
    """Import the stage code the units will run, here, once: each forked unit then starts with it.

    This is the cost a fresh interpreter pays per unit (pyarrow, numpy, the stage module: ~0.35
    CPU-s a unit on 2 shared cores, bench/RESULTS.md 3); each unit keeps pandas out itself (worker/task.py).
    """
    from shard_pipeline.worker.taskcmd import task_args

    stages = {(task_args(a) or [""])[0] for a in argvs if forkable(a, env)}
    if not stages:
        return
    from shard_pipeline.worker.entries import stage_main

    for name in sorted(stages):
        try:
            stage_main(name)
        except Exception:  # the unit itself reports it, in its own log
            pass


@dataclass
class Forked:
    """A forked unit, as much of Popen as run_units uses (pid, send_signal, returncode)."""

    pid: int
    returncode: int | None = None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def fork_unit(argv: Sequence[str], log_fd: int, env: dict[str, str] | None, *, new_session: bool) -> Forked:
    """Run the task line `argv` (`python -m shard_pipeline.worker.task ARGS`) as a fork of this process: same argv, same log (stdout
    and stderr on `log_fd`), same environment, same exit status, same signal dispositions as a fresh one."""
    # Blocked across the fork: a Ctrl-C must not run the parent's handler in the child, nor interrupt
    # the at-fork hooks (filelock's) before the child has its own dispositions and its log on stderr.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return Forked(pid)
    code = 1
    try:  # the child: never returns into the parent's code
        if new_session:
            os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a signal that came meanwhile is delivered now
        os.closerange(3, 1024)  # as Popen's close_fds: no other unit's log or pipe stays open here
        import logging

        for logger in [logging.root, *logging.root.manager.loggerDict.values()]:
            if isinstance(logger, logging.Logger):
                logger.handlers.clear()  # the parent's, on closed fds: the task sets up its own
        sys.stdin = open(os.devnull)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        from shard_pipeline.worker.taskcmd import TASK_MODULE, task_args

        sys.argv = [argv[0], *(task_args(argv) or [])]  # runpy puts the module's path first, as `python -m` does
        sys.modules.pop(TASK_MODULE, None)  # as in a fresh `python -m`, the module runs as __main__ only
        code = _exit_code(lambda: runpy.run_module(TASK_MODULE, run_name="__main__", alter_sys=True))
    except BaseException:  # noqa: BLE001 - anything the child did not turn into a status is a crash
        code = 1
    finally:
        os._exit(code)


def _exit_code(run_main: Callable[[], object]) -> int:
    """What `python -m` would exit with: SystemExit's status, a traceback and 1, or death by SIGINT."""
    import traceback

    rc: object = 0
    try:
        run_main()
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        traceback.print_exc()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        rc = 130
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        rc = 1
    _flush()
    return int(rc or 0)


def _flush() -> None:
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
