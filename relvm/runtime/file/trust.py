"""Who may run native code: the keys behind relvm's trust model.

An executable may carry native code (its generated kernels, in the ``kernels`` section). relvm
runs that code only when the file is signed by a key the user trusts; any other file runs
without it (see ``runtime/vm/kernels.py``). Keys are Ed25519 (libsodium, through PyNaCl's cffi
binding). Everything lives in the user's config directory, created owner-only::

    $RELVM_CONFIG_DIR, else $XDG_CONFIG_HOME/relvm, else ~/.config/relvm
        signing.key          this user's secret key (hex seed, mode 0600), made on first build
        trusted/<id>.pub     public keys the user trusts (``relvm trust add KEYFILE``)

The user's own key is always trusted, so a model built and saved by its user runs its kernels
with no flag. A key's id is the first 16 hex digits of the SHA-256 of its 32 public-key bytes.
A public key file holds one line: ``relvm-ed25519 <64 hex digits> [comment]``.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from ...errors import RelvmTrustError

KEY_PREFIX = "relvm-ed25519"
#: What a signature signs: this tag, then the SHA-256 of each signed section in order.
SIGNED_TAG = b"relvm executable signature v1\0"

_lock = threading.Lock()


def config_dir() -> Path:
    """Where the keys live (not created)."""
    return Path(_config_path())


def _config_path() -> str:
    """:func:`config_dir` as a string, from the environment as it is now (every load of a
    signed file asks, so this avoids pathlib and ``expanduser`` when nothing changed)."""
    env = (os.environ.get("RELVM_CONFIG_DIR"), os.environ.get("XDG_CONFIG_HOME"),
           os.environ.get("HOME"))
    cached = _paths.get(env)
    if cached is None:
        base = env[0]
        if not base:
            xdg = env[1] or os.path.join(os.path.expanduser("~"), ".config")
            base = os.path.join(xdg, "relvm")
        cached = _paths[env] = base
    return cached


_paths: dict[tuple, str] = {}


def private_dir(path: Path, what: str) -> Path:
    """``path`` as a directory only this user can write: created with mode 0700 if missing;
    refused (RelvmTrustError) if it is a symlink, owned by another user, or writable by group
    or others, since anyone who can write it could plant keys or code."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        raise RelvmTrustError(f"cannot create the {what} {path}: {e.strerror}") from None
    problem = unsafe(st)
    if problem:
        raise RelvmTrustError(f"the {what} {path} is {problem}; relvm does not use it "
                              f"(make it a directory of your own with mode 0700)")
    return path


def unsafe(st: os.stat_result, kind: str = "directory") -> str | None:
    """Why a file with this lstat result may have been written by someone else, or None."""
    want = stat.S_ISDIR if kind == "directory" else stat.S_ISREG
    if not want(st.st_mode):
        return f"not a {kind}" if not stat.S_ISLNK(st.st_mode) else "a symbolic link"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by group or others"
    return None


def key_id(public: bytes) -> str:
    return hashlib.sha256(public).hexdigest()[:16]


def public_key_line(public: bytes, comment: str = "") -> str:
    return f"{KEY_PREFIX} {public.hex()}" + (f" {comment}" if comment else "")


def parse_public_key(text: str, source: str) -> bytes:
    """The 32 key bytes of a public key file's text (RelvmTrustError naming ``source``)."""
    parts = text.strip().split(None, 2)
    if len(parts) < 2 or parts[0] != KEY_PREFIX or len(parts[1]) != 64:
        raise RelvmTrustError(f"{source} is not a relvm public key (expected a line "
                              f"'{KEY_PREFIX} <64 hex digits>')")
    try:
        return bytes.fromhex(parts[1])
    except ValueError:
        raise RelvmTrustError(f"{source}: the key is not hexadecimal") from None


def _nacl():
    try:
        import nacl.exceptions
        import nacl.signing
    except ImportError as e:  # pragma: no cover - a dependency of relvm
        raise RelvmTrustError(f"signatures need PyNaCl (pip install pynacl): {e}") from None
    return nacl.signing, nacl.exceptions


@dataclass(frozen=True)
class Signer:
    """This user's signing key."""

    secret: object  # nacl.signing.SigningKey
    public: bytes

    def sign(self, message: bytes) -> bytes:
        return self.secret.sign(message).signature


def signer() -> Signer:
    """This user's signing key, made (with its directory) on first use."""
    signing, _ = _nacl()
    with _lock:
        folder = private_dir(config_dir(), "relvm config directory")
        path = folder / "signing.key"
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            seed = os.urandom(32)
            _write_private(path, seed.hex() + "\n")
        except OSError as e:
            raise RelvmTrustError(f"cannot read the signing key {path}: {e.strerror}") from None
        else:
            with os.fdopen(fd, "r") as f:
                problem = unsafe(os.fstat(f.fileno()), "file")
                if problem is None and os.fstat(f.fileno()).st_mode & stat.S_IRWXO:
                    problem = "readable by others"
                if problem:
                    raise RelvmTrustError(f"the signing key {path} is {problem}; relvm does "
                                          f"not use it (chmod 600 it, or delete it to make a "
                                          f"new one)")
                text = f.read().strip()
            try:
                seed = bytes.fromhex(text)
            except ValueError:
                seed = b""
            if len(seed) != 32:
                raise RelvmTrustError(f"the signing key {path} is malformed; delete it to make "
                                      f"a new one")
    key = signing.SigningKey(seed)
    return Signer(key, bytes(key.verify_key))


def _write_private(path: Path, text: str) -> None:
    """Create ``path`` (mode 0600) with ``text``; never follows or replaces an existing file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
    except OSError as e:
        raise RelvmTrustError(f"cannot create {path}: {e.strerror}") from None
    with os.fdopen(fd, "w") as f:
        f.write(text)


def trusted_keys() -> dict[str, bytes]:
    """Key id -> public key: this user's own key (if made) and those in ``trusted/``.

    Read again only when the key files change (every load of a signed file asks)."""
    base = _config_path()
    stamp = (base, _stamp(os.path.join(base, "signing.key")),
             _stamp(os.path.join(base, "trusted")))
    with _lock:
        if _known.get("stamp") == stamp:
            return _known["keys"]
    folder = Path(base)
    keys: dict[str, bytes] = {}
    own = None
    if stamp[1] is not None:
        own = signer().public
        keys[key_id(own)] = own
    trusted = folder / "trusted"
    if stamp[2] is not None:
        private_dir(trusted, "trusted-keys directory")
        for entry in sorted(trusted.glob("*.pub")):
            if unsafe(os.lstat(entry), "file"):
                continue  # planted or symlinked: not a key this user added
            public = parse_public_key(entry.read_text(encoding="utf-8", errors="replace"),
                                      str(entry))
            keys[key_id(public)] = public
    with _lock:
        _known.update(stamp=stamp, keys=keys, own=key_id(own) if own else None)
    return keys


def own_key_id() -> str | None:
    """The id of this user's key, or None if none was made yet."""
    trusted_keys()
    return _known.get("own")


_known: dict = {}


def _stamp(path: str) -> tuple | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)


def trust_add(keyfile: str) -> str:
    """Trust the public key in ``keyfile``; returns its id."""
    try:
        text = Path(keyfile).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RelvmTrustError(f"cannot read {keyfile}: {getattr(e, 'strerror', e)}") from None
    public = parse_public_key(text, keyfile)
    kid = key_id(public)
    folder = private_dir(config_dir() / "trusted", "trusted-keys directory")
    target = folder / f"{kid}.pub"
    if not target.exists():
        _write_private(target, public_key_line(public, text.strip().split(None, 2)[2]
                                               if len(text.strip().split(None, 2)) > 2
                                               else "") + "\n")
    return kid


def trust_remove(kid: str) -> bool:
    """Stop trusting key ``kid``; False if it was not in the trusted list."""
    path = config_dir() / "trusted" / f"{kid}.pub"
    if "/" in kid or not path.is_file():
        return False
    path.unlink()
    return True


def verify(public: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is ``public``'s signature of ``message``."""
    signing, exceptions = _nacl()
    try:
        signing.VerifyKey(public).verify(message, signature)
    except (exceptions.BadSignatureError, ValueError, TypeError):
        return False
    return True


def signed_message(sections: list[bytes]) -> bytes:
    """What a signature signs: a tag and the SHA-256 of each signed section."""
    return SIGNED_TAG + b"".join(hashlib.sha256(s).digest() for s in sections)
