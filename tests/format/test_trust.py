"""Executables are safe to load from anywhere (issue 16): the native code a file carries runs
only when it is signed by a key the user trusts, or the caller says to trust it; the kernel
cache, saving and weights files cannot be turned against the user.

Each test has its own config directory (``RELVM_CONFIG_DIR``), so "the user's own key" and the
trusted list are the test's.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import warnings

import numpy as np
import pytest

import relvm
from relvm.backends import toolchain
from relvm.runtime.file import trust
from relvm.runtime.file.format import assemble, sections_of
from relvm.runtime.vm.kernels import UntrustedCodeWarning

from formatcases import with_meta

#: Two fused chains with generated kernels (and a library kernel between them).
TEXT = """def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(4), float32]) {
  %0 = tanh(add(multiply(%x, 2f), %y));
  %1 = sum(%0, axis=[1], keepdims=True);
  nn.relu(subtract(%0, %1))
}"""
X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
Y = np.array([0.5, -0.25, 0, 1], np.float32)


def expected() -> np.ndarray:
    t = np.tanh(X * 2 + Y)
    return np.maximum(t - t.sum(axis=1, keepdims=True), 0)


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    """A fresh config directory (no key yet) and kernel cache for each test."""
    monkeypatch.setenv("RELVM_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("RELVM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "config"


def build() -> relvm.Executable:
    return relvm.build(relvm.parse(TEXT))


def unsigned(data: bytes) -> bytes:
    sections = sections_of(data)
    sections["sign"] = b""
    return assemble(sections)


def run(exe: relvm.Executable) -> tuple[np.ndarray, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrustedCodeWarning)
        vm = relvm.VirtualMachine(exe)
    return vm.invoke("main", X, Y), vm.stats.native_code


# --- the user's own builds ------------------------------------------------------------------------

@pytest.mark.e2e
def test_a_build_saved_by_its_user_runs_its_own_kernels_with_no_flag(config, tmp_path) -> None:
    build().save(tmp_path / "m.rvm")
    key = config / "signing.key"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o700
    exe = relvm.load(tmp_path / "m.rvm")
    assert exe.native.trusted and exe.native.why == "signed by your key"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at all
        out, path = run(exe)
    np.testing.assert_allclose(out, expected(), rtol=1e-6, atol=1e-6)
    assert path == "the file's own kernels: signed by your key"


@pytest.mark.e2e
@pytest.mark.parametrize("compiler", [True, False], ids=["regenerated", "library-steps"])
def test_an_unsigned_file_runs_correctly_without_its_native_code(compiler, monkeypatch) -> None:
    data = unsigned(build().save_bytes())
    if not compiler:
        monkeypatch.setenv("PATH", "/nonexistent")
        monkeypatch.delenv("CC", raising=False)
    exe = relvm.load_bytes(data)
    assert not exe.native.trusted and exe.native.why == "the file is not signed"
    with pytest.warns(UntrustedCodeWarning, match=r"not running the native code this "
                      r"executable carries \(the file is not signed\).*rebuild it yourself, or "
                      r"load it with trust_native_code=True"):
        vm = relvm.VirtualMachine(exe)
    np.testing.assert_allclose(vm.invoke("main", X, Y), expected(), rtol=1e-6, atol=1e-6)
    want = ("generated here from the file's kernel descriptions: the file is not signed"
            if compiler else "relvm's library kernels, step by step: the file is not signed")
    assert vm.stats.native_code.startswith(want)


@pytest.mark.e2e
def test_another_users_file_is_trusted_once_its_key_is(config, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RELVM_CONFIG_DIR", str(tmp_path / "alice"))
    data = build().save_bytes()
    alice = trust.signer()
    keyfile = tmp_path / "alice.pub"
    keyfile.write_text(trust.public_key_line(alice.public, "alice") + "\n")
    monkeypatch.setenv("RELVM_CONFIG_DIR", str(config))  # bob
    exe = relvm.load_bytes(data)
    kid = trust.key_id(alice.public)
    assert exe.native == relvm.runtime.executable.NativeCode(
        False, f"it is signed by key {kid}, which you do not trust", kid)
    with pytest.warns(UntrustedCodeWarning, match=f"relvm trust add KEYFILE \\(key {kid}\\)"):
        relvm.VirtualMachine(exe)
    assert trust.trust_add(str(keyfile)) == kid
    exe = relvm.load_bytes(data)
    assert exe.native.trusted and exe.native.why == f"signed by key {kid}, which you trust"
    assert run(exe)[1].startswith("the file's own kernels")
    assert trust.trust_remove(kid) and not relvm.load_bytes(data).native.trusted


@pytest.mark.e2e
def test_a_file_changed_after_signing_is_not_trusted() -> None:
    data = with_meta(build().save_bytes(), lambda meta: meta.update(writer="someone"))
    exe = relvm.load_bytes(data)
    assert not exe.native.trusted and "does not match its contents" in exe.native.why
    np.testing.assert_allclose(run(exe)[0], expected(), rtol=1e-6, atol=1e-6)


@pytest.mark.e2e
def test_an_untrusted_file_saved_again_is_not_signed() -> None:
    exe = relvm.load_bytes(unsigned(build().save_bytes()))
    assert sections_of(exe.save_bytes())["sign"] == b""
    trusted = relvm.load_bytes(build().save_bytes())
    assert sections_of(trusted.save_bytes())["sign"] != b""


@pytest.mark.e2e
def test_a_malformed_signature_section_is_a_format_error() -> None:
    sections = sections_of(build().save_bytes())
    sections["sign"] = b'{"algorithm": "rsa"}'
    with pytest.raises(relvm.RelvmFormatError, match="expected {algorithm: ed25519") as info:
        relvm.load_bytes(assemble(sections))
    assert info.value.section == "sign"


# --- native code that must not run ------------------------------------------------------------------

def _evil_library(tmp_path, marker) -> bytes:
    """A library whose constructor writes ``marker`` when it is loaded, and which defines the
    kernel names of TEXT's build (so, trusted, it would be used)."""
    src = tmp_path / "evil.c"
    src.write_text(f"""
#include <stdio.h>
#include <stdint.h>
__attribute__((constructor)) static void planted(void) {{
    FILE *f = fopen("{marker}", "w");
    if (f) {{ fputs("ran", f); fclose(f); }}
}}
""" + "".join(f"void relvm_fused_{k}(void *c, int64_t a, int64_t b) {{ (void)c; (void)a; "
              f"(void)b; }}\n" for k in range(8)))
    lib = tmp_path / "evil.so"
    subprocess.run([os.environ.get("CC") or shutil.which("cc") or "gcc", "-shared", "-fPIC",
                    str(src), "-o", str(lib)], check=True)
    return lib.read_bytes()


@pytest.mark.e2e
def test_a_planted_constructor_runs_only_with_explicit_trust(tmp_path) -> None:
    marker = tmp_path / "marker"
    sections = sections_of(build().save_bytes())
    sections["kernels"] = _evil_library(tmp_path, marker)
    sections["sign"] = b""
    data = assemble(sections)
    out, path = run(relvm.load_bytes(data))  # load, VM, invoke: the default
    np.testing.assert_allclose(out, expected(), rtol=1e-6, atol=1e-6)
    assert path.startswith("generated here") and not marker.exists()
    relvm.VirtualMachine(relvm.load_bytes(data, trust_native_code=True))  # (kernels that do
    assert marker.read_text() == "ran"                                     # nothing: not run)


@pytest.mark.e2e
def test_system_is_refused_even_when_trusted() -> None:
    def to_system(meta) -> None:
        meta["kernels"][0]["attrs"]["plan"]["symbol"] = "system"
    data = with_meta(build().save_bytes(), to_system)
    with pytest.raises(relvm.RelvmFormatError, match="relvm_fused_") as info:
        relvm.VirtualMachine(relvm.load_bytes(data, trust_native_code=True))
    assert info.value.section in ("meta", "kernels")


@pytest.mark.e2e
def test_a_kernel_name_the_library_does_not_define_itself_is_refused(tmp_path) -> None:
    """dlsym would find a symbol of a library the kernel library links to: only its own
    .dynsym counts."""
    (tmp_path / "dep.c").write_text("void relvm_fused_0(void *c, long a, long b) {}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "dep.c"), "-o",
                    str(tmp_path / "libdep.so")], check=True)
    src = tmp_path / "imports.c"
    src.write_text("extern void relvm_fused_0(void *, long, long);\n"
                   "void relvm_fused_1(void *c, long a, long b) { relvm_fused_0(c, a, b); }\n")
    lib = tmp_path / "imports.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib), f"-L{tmp_path}",
                    "-ldep", f"-Wl,-rpath,{tmp_path}"], check=True)
    from relvm.backends.elf import defined_symbols
    from relvm.backends.fused import FusedLibrary

    data = lib.read_bytes()
    assert "relvm_fused_1" in defined_symbols(data)
    assert "relvm_fused_0" not in defined_symbols(data)
    library = FusedLibrary(data)
    assert library.symbol("relvm_fused_1") is not None
    with pytest.raises(relvm.RelvmFormatError, match="does not define relvm_fused_0 itself"):
        library.symbol("relvm_fused_0")


# --- the kernel cache ---------------------------------------------------------------------------

def _cache_entries(cache) -> list:
    return sorted(p.name for p in (cache / "kernels").iterdir() if p.suffix == ".so")


@pytest.mark.e2e
def test_a_planted_cache_entry_is_not_used(tmp_path) -> None:
    cache = tmp_path / "cache"
    build()
    (name,) = _cache_entries(cache)
    planted = b"\x7fELF planted"
    (cache / "kernels" / name).write_bytes(planted)  # its recorded hash differs
    exe = build()
    assert exe.kernel_library != planted
    np.testing.assert_allclose(run(exe)[0], expected(), rtol=1e-6, atol=1e-6)
    os.unlink(cache / "kernels" / name.replace(".so", ".sha256"))  # no recorded hash
    (cache / "kernels" / name).write_bytes(planted)
    assert build().kernel_library != planted


@pytest.mark.e2e
def test_a_cache_others_can_write_is_refused(tmp_path) -> None:
    (tmp_path / "cache" / "kernels").mkdir(parents=True)
    os.chmod(tmp_path / "cache" / "kernels", 0o777)
    with pytest.warns(RuntimeWarning, match=r"kernel cache directory .* is writable by group "
                      r"or others; relvm does not use it .*private temporary directory"):
        exe = build()
    assert exe.kernel_library and _cache_entries(tmp_path / "cache") == []
    np.testing.assert_allclose(run(exe)[0], expected(), rtol=1e-6, atol=1e-6)


@pytest.mark.e2e
def test_a_symlinked_cache_entry_is_not_followed(tmp_path) -> None:
    cache = tmp_path / "cache"
    build()
    (name,) = _cache_entries(cache)
    real = cache / "kernels" / name
    other = tmp_path / "elsewhere.so"
    shutil.move(real, other)
    os.symlink(other, real)
    assert toolchain._cached(cache / "kernels", name[:-3]) is None


# --- saving and weights files -------------------------------------------------------------------

@pytest.mark.e2e
def test_save_never_follows_a_link_at_the_old_temporary_path(tmp_path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "m.rvm"
    os.symlink(victim, f"{target}.tmp{os.getpid()}")  # where relvm 0.1.0 wrote
    build().save(target)
    assert victim.read_text() == "precious"
    assert relvm.load(target).native.trusted
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_fifo_where_the_weights_are_is_refused_at_once(tmp_path) -> None:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n, 64), float32], "
                                  "%w: Tensor[(64), float32]) { add(%x, %w) }"),
                      params={"w": np.ones(64, np.float32)})
    exe.save(tmp_path / "m.rvm", weights=tmp_path / "m.weights", min_weight_bytes=64)
    os.unlink(tmp_path / "m.weights")
    os.mkfifo(tmp_path / "m.weights")
    with pytest.raises(relvm.RelvmFormatError, match="is not a regular file") as info:
        relvm.load(tmp_path / "m.rvm")
    assert info.value.section == "weights"


@pytest.mark.parametrize("ref", ["../m.weights", "sub/m.weights", "/etc/passwd", "..", ".w",
                                 ""])
def test_a_weights_name_that_is_not_a_plain_file_name_is_refused(tmp_path, ref) -> None:
    exe = relvm.build(relvm.parse("def @main(%x: Tensor[(n, 64), float32], "
                                  "%w: Tensor[(64), float32]) { add(%x, %w) }"),
                      params={"w": np.ones(64, np.float32)})
    exe.save(tmp_path / "m.rvm", weights=tmp_path / "m.weights", min_weight_bytes=64)
    data = with_meta((tmp_path / "m.rvm").read_bytes(),
                     lambda meta: meta["weights"].update(path=ref))
    (tmp_path / "m.rvm").write_bytes(data)
    with pytest.raises(relvm.RelvmFormatError, match="plain file name beside the executable"):
        relvm.load(tmp_path / "m.rvm")


@pytest.mark.e2e
def test_weights_must_be_saved_beside_the_executable(tmp_path) -> None:
    (tmp_path / "sub").mkdir()
    with pytest.raises(ValueError, match="must be in the executable's directory"):
        build().save(tmp_path / "m.rvm", weights=tmp_path / "sub" / "m.weights")
