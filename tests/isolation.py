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
