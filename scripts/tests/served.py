"""A server process for the Python-side tests and the server bench: started on a loopback port,
awaited on `/health`, stopped (SIGTERM, then SIGKILL after 10 s) when the `with` block ends.
Its output goes to a log file whose tail failures quote."""

import os
import socket
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`argv(port)` is the command line; `port` 0 picks a free one. After the block,
    `returncode` is the exit status (-15: ended by the SIGTERM)."""

    def __init__(self, argv, port=0, timeout=60):
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.argv = argv(self.port)
        self.timeout = timeout
        self.returncode = None

    def __enter__(self):
        self.log = tempfile.NamedTemporaryFile(prefix="tessera-served-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.__exit__(None, None, None)
                raise RuntimeError(f"{self.argv[0]} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(f"{self.argv[0]} not healthy after {self.timeout} s:\n{self.tail()}")

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.returncode = self.proc.returncode
        self.log.close()
        return False

    def tail(self, n=20):
        try:
            with open(self.log.name, errors="replace") as f:
                return "\n".join(f.read().splitlines()[-n:])
        except OSError:
            return "(no server log)"
