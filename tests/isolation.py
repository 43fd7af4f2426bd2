"""Code for subprocesses that must prove the runtime needs neither the front end nor lark."""

#: Prepend to a subprocess script: afterwards importing lark, relvm.frontend, relvm.passes or
#: relvm.compiler raises ImportError (modules already imported are removed first).
BLOCK_FRONT_END = '''
import sys

BLOCKED = ("lark", "relvm.frontend", "relvm.compiler", "relvm.passes")
for _name in list(sys.modules):
    if _name.startswith(BLOCKED):
        del sys.modules[_name]


class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(BLOCKED):
            raise ImportError(f"blocked import of {name}")
        return None


sys.meta_path.insert(0, _Block())
try:
    import lark  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("lark is still importable")
'''


def run_python(code: str, *args: str, env: dict | None = None, timeout: int = 300):
    """Run ``code`` in a fresh interpreter that imports the *installed* relvm.

    ``-I`` (isolated mode) keeps the working directory and PYTHONPATH off ``sys.path``, so the
    source folder (which has no compiled kernels in a fresh clone) never shadows the install.
    """
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-I", "-c", code, *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))
