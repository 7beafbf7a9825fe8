"""Run many short `sweeper` (or `python -m MODULE`) commands, each in a process of its own, without paying Python's start and
the CLI's imports every time: one warm interpreter imports the CLI once, then forks a child per
command. The child is a real process: its own working directory, stdout, stderr (file descriptors 1
and 2) and exit code, running `python -m sweeper.cli ARGS` as the console does. For the tests that
run whole corpora of refusals; everything else runs `sweeper_cmd` as a plain subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

_SERVER = r"""
import gc, json, os, runpy, sys, tempfile, time, traceback
import importlib, pkgutil, sweeper, sweeper.cli, sweeper.commands
for verb in pkgutil.iter_modules(sweeper.commands.__path__):  # the verbs' modules, as each verb imports its own
    importlib.import_module(f"sweeper.commands.{verb.name}")
for name in sys.argv[1:]:  # and what the caller asks for (what a verb imports late)
    importlib.import_module(name)
del sys.modules["sweeper.cli"], sweeper.cli  # the children run it afresh as __main__, as `python -m sweeper.cli` does
gc.freeze()  # what is loaded now is never collected: a child's exit then skips walking it (torch's: ~1 s a child)
replies = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
for line in sys.stdin:
    request = json.loads(line)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(request["cwd"])
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.argv = [request["module"], *request["args"]]
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:  # as the interpreter turns SystemExit into an exit code
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.exit(code)  # out of the loop: the interpreter ends as a fresh one would (atexit, flushes)
    deadline = time.monotonic() + request["timeout"]
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            done = os.waitpid(pid, 0)
            break
        time.sleep(0.005)
    texts = []
    for f in (out, err):
        f.seek(0)
        texts.append(f.read().decode("utf-8", "replace"))
        f.close()
    replies.write(json.dumps({"rc": os.waitstatus_to_exitcode(done[1]), "out": texts[0], "err": texts[1]}) + "\n")
    replies.flush()
"""


class ForkedCli:
    """`run(args, cwd)` answers like `subprocess.run(sweeper_cmd(*args), cwd=cwd, env=env, capture_output=True,
    text=True)`, `run(args, cwd, module=NAME)` like `python -m NAME ARGS`; a command past its timeout is
    killed (returncode -9). `preload`: modules the warm
    interpreter imports as well (torch's `trainables.train` for commands that train)."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...] = ()):
        self._server = subprocess.Popen([sys.executable, "-c", _SERVER, *preload], env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def run(self, *args, cwd, timeout: float = 60, module: str = "sweeper.cli") -> subprocess.CompletedProcess:
        request = {"module": module, "args": [str(a) for a in args], "cwd": str(cwd), "timeout": timeout}
        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        line = self._server.stdout.readline()
        assert line, "the forking CLI server ended"
        reply = json.loads(line)
        return subprocess.CompletedProcess([module, *map(str, args)], reply["rc"], reply["out"], reply["err"])

    def close(self) -> None:
        self._server.stdin.close()
        self._server.wait(timeout=30)
