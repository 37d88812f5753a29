"""The CPU as the running process sees it: the x86 ``CPUID`` instruction, and the ISA baselines.

``/proc/cpuinfo`` is the kernel's view of the host. A job under ``qemu-x86_64 -cpu MODEL``
reads the same host file, but its instructions (and so NumPy's, OpenBLAS' and oneDNN's
dispatch) see the emulated CPU, which only ``CPUID`` itself tells. ``read()`` executes
``CPUID`` (a few bytes of machine code mapped executable, called through ctypes: no
compiler, no third-party package) and ``parse()`` (pure) turns the registers into the
fields the fingerprint records, with ``/proc/cpuinfo``'s flag names.

``python -m launcher.record.probe.cpuid`` prints the JSON: the launcher runs it under qemu to
learn the emulated CPU before a replay (``launch replay RUN --cpu MODEL``).

The baselines are the x86-64 psABI micro-architecture levels: ``determinism=portable``
caps every runtime ISA dispatch at one (``launcher.job.determinism``), and ``supports``
says whether a CPU has every flag of it.
"""

from __future__ import annotations

import json
import platform
import sys

# x86-64 psABI levels, as /proc/cpuinfo names the flags (pni is SSE3, abm is LZCNT).
_V2 = ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3")
_V3 = (*_V2, "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")
_V4 = (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
LEVELS: dict[str, tuple[str, ...]] = {"x86-64-v2": _V2, "x86-64-v3": _V3, "x86-64-v4": _V4}

# (leaf, subleaf, register, bit) -> /proc/cpuinfo flag name
_FLAGS = {
    (1, 0, "ecx", 0): "pni",
    (1, 0, "ecx", 1): "pclmulqdq",
    (1, 0, "ecx", 9): "ssse3",
    (1, 0, "ecx", 12): "fma",
    (1, 0, "ecx", 13): "cx16",
    (1, 0, "ecx", 19): "sse4_1",
    (1, 0, "ecx", 20): "sse4_2",
    (1, 0, "ecx", 22): "movbe",
    (1, 0, "ecx", 23): "popcnt",
    (1, 0, "ecx", 25): "aes",
    (1, 0, "ecx", 26): "xsave",
    (1, 0, "ecx", 28): "avx",
    (1, 0, "ecx", 29): "f16c",
    (1, 0, "edx", 25): "sse",
    (1, 0, "edx", 26): "sse2",
    (7, 0, "ebx", 3): "bmi1",
    (7, 0, "ebx", 5): "avx2",
    (7, 0, "ebx", 8): "bmi2",
    (7, 0, "ebx", 16): "avx512f",
    (7, 0, "ebx", 17): "avx512dq",
    (7, 0, "ebx", 21): "avx512ifma",
    (7, 0, "ebx", 28): "avx512cd",
    (7, 0, "ebx", 29): "sha_ni",
    (7, 0, "ebx", 30): "avx512bw",
    (7, 0, "ebx", 31): "avx512vl",
    (7, 0, "ecx", 1): "avx512vbmi",
    (7, 0, "ecx", 6): "avx512_vbmi2",
    (7, 0, "ecx", 8): "gfni",
    (7, 0, "ecx", 9): "vaes",
    (7, 0, "ecx", 10): "vpclmulqdq",
    (7, 0, "ecx", 11): "avx512_vnni",
    (7, 0, "ecx", 12): "avx512_bitalg",
    (7, 0, "ecx", 14): "avx512_vpopcntdq",
    (7, 0, "edx", 8): "avx512_vp2intersect",
    (7, 0, "edx", 22): "amx_bf16",
    (7, 0, "edx", 23): "avx512_fp16",
    (7, 0, "edx", 24): "amx_tile",
    (7, 0, "edx", 25): "amx_int8",
    (7, 1, "eax", 4): "avx_vnni",
    (7, 1, "eax", 5): "avx512_bf16",
    (0x80000001, 0, "ecx", 0): "lahf_lm",
    (0x80000001, 0, "ecx", 5): "abm",
    (0x80000001, 0, "ecx", 6): "sse4a",
    (0x80000001, 0, "ecx", 16): "fma4",
}
LEAVES = (
    (0, 0),
    (1, 0),
    (7, 0),
    (7, 1),
    (0x80000000, 0),
    (0x80000001, 0),
    (0x80000002, 0),
    (0x80000003, 0),
    (0x80000004, 0),
)
_REGS = ("eax", "ebx", "ecx", "edx")


def _text(*words: int) -> str:
    return b"".join(w.to_bytes(4, "little") for w in words).decode("ascii", "replace").strip("\0 ").strip()


def parse(regs: dict[tuple[int, int], tuple[int, int, int, int]]) -> dict:
    """Vendor, brand, family/model/stepping and flags from ``{(leaf, subleaf): (eax, ebx, ecx, edx)}``.

    Family and model are the displayed ones (the extended fields added as the CPU vendors
    document), so they read as ``/proc/cpuinfo``'s ``cpu family`` and ``model``."""
    max_leaf = regs.get((0, 0), (0, 0, 0, 0))[0]
    max_ext = regs.get((0x80000000, 0), (0, 0, 0, 0))[0]
    _, b, c, d = regs.get((0, 0), (0, 0, 0, 0))
    eax1 = regs.get((1, 0), (0, 0, 0, 0))[0]
    base_family, base_model = (eax1 >> 8) & 0xF, (eax1 >> 4) & 0xF
    family = base_family + ((eax1 >> 20) & 0xFF if base_family == 0xF else 0)
    model = base_model + (((eax1 >> 16) & 0xF) << 4 if base_family in (6, 0xF) else 0)
    flags = set()
    for (leaf, sub, reg, bit), name in _FLAGS.items():
        if leaf > (max_ext if leaf >= 0x80000000 else max_leaf):
            continue
        value = regs.get((leaf, sub))
        if value is not None and value[_REGS.index(reg)] >> bit & 1:
            flags.add(name)
    brand = ""
    if max_ext >= 0x80000004:
        brand = _text(*(w for leaf in (0x80000002, 0x80000003, 0x80000004) for w in regs.get((leaf, 0), (0,) * 4)))
    return {
        "vendor": _text(b, d, c),
        "model": brand or None,
        "family": str(family),
        "model_number": str(model),
        "stepping": str(eax1 & 0xF),
        "flags": sorted(flags),
    }


def supports(flags: list[str] | set[str], level: str) -> bool:
    """Whether a CPU with these flags (``/proc/cpuinfo`` names) has every feature of ``level``."""
    return set(LEVELS[level]) <= set(flags)


def levels(flags: list[str] | set[str]) -> list[str]:
    """The x86-64 levels a CPU with ``flags`` supports (``[]`` on another architecture)."""
    return [name for name in LEVELS if supports(flags, name)]


def read() -> dict | None:
    """This process' CPU by ``CPUID``, parsed; None off x86-64 or where code cannot be mapped executable."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        call = _cpuid_function()
    except (OSError, ValueError, AttributeError):
        return None
    regs = {}
    max_leaf, max_ext = call(0, 0)[0], call(0x80000000, 0)[0]
    for leaf, sub in LEAVES:
        if leaf <= (max_ext if leaf >= 0x80000000 else max_leaf):
            regs[(leaf, sub)] = call(leaf, sub)
    return parse(regs)


# push rbx; mov eax,edi; mov ecx,esi; mov r8,rdx; cpuid; mov [r8],eax; mov [r8+4],ebx;
# mov [r8+8],ecx; mov [r8+12],edx; pop rbx; ret   (System V: leaf, subleaf, out pointer)
_CODE = bytes.fromhex("5389f889f14989d00fa241890041895804418948084189500c5bc3")
_KEEP: list = []  # the mapping and the function live as long as the process


def _cpuid_function():
    import ctypes
    import mmap

    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(_CODE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    out_type = ctypes.c_uint32 * 4
    function = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(out_type))(address)
    _KEEP.extend([page, function])

    def call(leaf: int, sub: int) -> tuple[int, int, int, int]:
        out = out_type()
        function(leaf, sub, ctypes.byref(out))
        return tuple(out)

    return call


def main() -> None:
    """Print this process' CPU as JSON (``null`` where CPUID cannot be read) and exit."""
    seen = read()
    print(json.dumps(seen, sort_keys=True))
    sys.exit(0 if seen is not None else 1)


if __name__ == "__main__":
    main()
