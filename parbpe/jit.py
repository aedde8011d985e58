"""The optional JIT: numba kernels, from the `fast` extra (pip install 'parbpe[fast]').

numpy stays the reference: every kernel declared here has a numpy twin in its module, the tests
compare the two, and the numpy path runs wherever numba is absent or the JIT is off. The mode is one
per process, read from PARBPE_JIT (auto, on, off; auto by default) and set by `set_mode` (a run sets
it from TrainConfig.jit; it is written back to the environment, so spawned workers inherit it):
- auto: numba when it imports, else numpy;
- on: numba, and a one-line error naming the extra when it is missing;
- off: numpy.

A module declares a kernel with `@kernel` on a plain Python function written in numba's subset; it is
compiled on its first call (cached on disk, so a later process loads it) and never when the JIT is off.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .refused_imports import refused

MODES = ("auto", "on", "off")
ENV = "PARBPE_JIT"
EXTRA_HINT = "the numba JIT needs the fast extra: pip install 'parbpe[fast]'"

_numba: Any = None
_numba_checked = False
_extras_kept_out = False  # keep_extras_out_of_numba was called
_lock = threading.RLock()  # numba's import and each kernel's dispatcher are made once, whichever thread asks first
_preloading: dict[str, threading.Thread] = {}


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"{ENV}/--jit must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def mode() -> str:
    """The process's JIT mode (auto, on, off), from PARBPE_JIT."""
    return _check_mode(os.environ.get(ENV, "auto").strip().lower() or "auto")


def set_mode(new_mode: str) -> None:
    """Set the JIT mode of this process and of the workers it starts (through the environment)."""
    os.environ[ENV] = _check_mode(new_mode)
    if new_mode == "on":
        require()


def numba_module() -> Any:
    """numba, or None when it is not installed (imported once, on first use)."""
    global _numba, _numba_checked
    if not _numba_checked:
        with _lock:
            if not _numba_checked:
                try:
                    with _numba_config_file_unread():
                        import numba
                except ImportError:
                    numba = None
                if numba is not None and _extras_kept_out:
                    _numba_without_cffi()
                    _cache_loads_without_registries()
                _numba = numba
                _numba_checked = True  # after _numba: another thread reads the flag without the lock
    return _numba


def keep_extras_out_of_numba() -> None:
    """In a process that is parbpe's alone (the parbpe command, its workers): have numba take two
    optional modules as absent, whose import its start pays where they are installed and parbpe never
    uses. cffi: numba's first kernel imports it (and pycparser, which builds its parser's tables) to
    type cffi functions, which no parbpe kernel calls: 0.05-0.1 s of the 0.4-0.6 s numba's start costs
    before counting workers fork (2026-11-26). yaml: numba's import reads it for a .numba_config.yaml
    in the working directory, kept where there is one (_numba_config_file_unread): `import numba`
    0.15-0.29 s against 0.21-0.32 (BENCHMARKS 39). Both still import for whoever asks; nothing is done
    where they (or numba, for yaml; numba's cffi support, for cffi) are loaded already. And kernels
    load from numba's cache without the registries only compiling reads (_cache_loads_without_registries)."""
    global _extras_kept_out
    _extras_kept_out = True
    if loaded():
        _numba_without_cffi()
        _cache_loads_without_registries()


def _numba_config_file_unread() -> contextlib.AbstractContextManager:
    """Where keep_extras_out_of_numba was called and the working directory has no .numba_config.yaml (the
    one file numba's config reads with yaml), yaml refused to numba's import; elsewhere nothing."""
    if _extras_kept_out and "yaml" not in sys.modules and not os.path.isfile(".numba_config.yaml"):
        return refused("yaml")
    return contextlib.nullcontext()


def _numba_without_cffi() -> None:
    if "cffi" not in sys.modules and "numba.core.typing.cffi_utils" not in sys.modules:
        with refused("cffi"):
            import numba.core.typing.cffi_utils  # noqa: F401 (it asks once, and remembers the answer)


def _cache_loads_without_registries() -> None:
    """Have numba load a kernel from its cache without first refreshing its contexts: the refresh
    imports and installs every typing and lowering registry (numpy's, the cpython types', the typed
    containers': some 60 modules) that only compiling reads; code loaded from the cache needs numba's
    runtime (NRT) alone, initialized here as the refresh would. The eight loads before counting
    workers fork took 0.23-0.28 s, now 0.10 (numba 0.68, 2026-11-27). A kernel that is not in the cache
    is compiled as ever: numba's compiler refreshes both contexts itself. Where numba's cache is not
    of the shape this is written for, its own load_overload stays."""
    from numba.core import caching
    from numba.core.runtime import rtsys

    cache = caching.Cache
    if getattr(cache.load_overload, "parbpe_light", False):
        return
    if not (hasattr(cache, "_load_overload") and hasattr(cache, "_guard_against_spurious_io_errors")
            and hasattr(rtsys, "initialize")):
        return

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    load_overload.parbpe_light = True  # type: ignore[attr-defined]
    cache.load_overload = load_overload


def require() -> None:
    """Raise ImportError naming the extra when numba is missing."""
    if numba_module() is None:
        raise ImportError(EXTRA_HINT)


def installed() -> bool:
    """Whether numba can be imported, without importing it (its import costs about 0.5 s)."""
    if _numba_checked:
        return _numba is not None
    return importlib.util.find_spec("numba") is not None


def enabled() -> bool:
    """Whether the numba kernels run in this process now (numba itself is imported by the first kernel)."""
    current = mode()
    if current == "off":
        return False
    if current == "on":
        require()
        return True
    return installed()


def worth(work: int, at_least: int) -> bool:
    """Whether kernels run on `work` (bytes, tokens: the caller's unit): always when the mode is on,
    never when off; with auto when numba is installed and work >= at_least, the size from which the
    kernels repay numba's import and loading (about 0.5-1 s and 100 MB a process)."""
    return (mode() == "on" or work >= at_least) and enabled()


def loaded() -> bool:
    """Whether numba is imported in this process already (a kernel then costs no import)."""
    return _numba_checked and _numba is not None


def warm() -> bool:
    """Whether kernels run in this process at no cost of numba's start: with --jit on (which loads
    it), or under auto where numba is loaded already (for one small job its start costs more)."""
    current = mode()
    if current == "on":
        require()
        return True
    return current == "auto" and loaded()


def would_run(work: int, at_least: int) -> bool:
    """worth(work, at_least) without importing numba (installed or not is all it looks at)."""
    current = mode()
    return current != "off" and (current == "on" or work >= at_least) and installed()


@contextlib.contextmanager
def using(new_mode: str) -> Iterator[None]:
    """This JIT mode in this process and the workers it starts, for the duration; then as it was."""
    before = os.environ.get(ENV)
    set_mode(new_mode)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


_PENDING_HELPERS: list[tuple[dict, str]] = []


def helper(python: Callable) -> Callable:
    """Declare a function kernels call: plain Python until the next kernel compiles, which compiles
    the helpers declared so far in place first (numba resolves a kernel's globals when it compiles it)."""
    _PENDING_HELPERS.append((python.__globals__, python.__name__))
    return python


def _compile_helpers() -> None:
    _define_prefetch()
    while _PENDING_HELPERS:
        space, name = _PENDING_HELPERS.pop()
        space[name] = numba_module().njit(cache=True, nogil=True, inline="always")(space[name])


def prefetch(array: Any, index: int) -> None:
    """Ask the CPU for the cache line of array[index] (of a 2-D array: row index's first item) before
    a kernel reads it, without waiting for it: in a kernel, LLVM's prefetch instruction; in Python,
    nothing. For loops over positions known ahead whose rows lie far apart in an array far larger
    than the caches: each row is a miss that the loop would wait for in turn (BENCHMARKS 37)."""


_prefetch_defined = False


def _define_prefetch() -> None:
    """Teach numba `prefetch` (once, with numba loaded): an overload that lowers to llvm.prefetch."""
    global _prefetch_defined
    if _prefetch_defined:
        return
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic, overload

    @intrinsic
    def _llvm_prefetch(typingctx, array, index):
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            array_type, index_type = signature.args
            view = context.make_array(array_type)(context, builder, args[0])
            at = context.cast(builder, args[1], index_type, types.intp)
            zero = context.get_constant(types.intp, 0)
            pointer = cgutils.get_item_pointer2(
                context, builder, data=view.data, shape=cgutils.unpack_tuple(builder, view.shape, array_type.ndim),
                strides=cgutils.unpack_tuple(builder, view.strides, array_type.ndim), layout=array_type.layout,
                inds=[at] + [zero] * (array_type.ndim - 1), wraparound=False, boundscheck=False)
            byte_pointer = builder.bitcast(pointer, ir.IntType(8).as_pointer())
            i32 = ir.IntType(32)
            signature_ir = ir.FunctionType(ir.VoidType(), [byte_pointer.type, i32, i32, i32])
            instruction = cgutils.get_or_insert_function(builder.module, signature_ir, "llvm.prefetch.p0")
            builder.call(instruction, [byte_pointer, i32(0), i32(3), i32(1)])  # read, keep in all levels, data
            return context.get_dummy_value()

        return types.void(array, index), codegen

    @overload(prefetch, inline="always")
    def _prefetch_overload(array, index):
        return lambda array, index: _llvm_prefetch(array, index)

    _prefetch_defined = True


class Kernel:
    """A numba kernel compiled on first call (njit, nogil, cached on disk); `python` is the plain function."""

    def __init__(self, python: Callable, options: dict) -> None:
        self.python = python
        self.options = options
        self._compiled: Callable | None = None
        self.__name__ = python.__name__
        self.__doc__ = python.__doc__

    def __call__(self, *args: Any) -> Any:
        if self._compiled is None:
            with _lock:
                if self._compiled is None:
                    require()
                    _compile_helpers()
                    self._compiled = numba_module().njit(cache=True, nogil=True, **self.options)(self.python)
        if threading.get_ident() != _MAIN_THREAD:
            return self._call(args)  # (signal handlers run in the main thread only)
        _outer_hook[0] = previous = sys.unraisablehook
        sys.unraisablehook = _keep_interrupts
        try:
            result = self._call(args)
        finally:
            sys.unraisablehook = previous
        if _swallowed:
            interrupt = _swallowed[0]
            _swallowed.clear()
            raise interrupt
        return result

    def _call(self, args: tuple) -> Any:
        try:
            return self._compiled(*args)
        except SystemError as exc:
            raise _raised_by_a_signal_handler(exc) from None


_MAIN_THREAD = threading.main_thread().ident
_outer_hook: list[Callable] = [sys.unraisablehook]  # the hook _keep_interrupts stands in for
_swallowed: list[BaseException] = []  # what it kept (main thread only: no lock)


def _keep_interrupts(unraisable: Any) -> None:
    """sys.unraisablehook while a kernel runs in the main thread: Ctrl-C's KeyboardInterrupt raised
    inside a C callback (llvmlite's, as numba compiles a kernel and writes it to its cache) is only
    reported by ctypes, and the run went on to the end with exit 0 (found by the suite in a fresh
    clone: tests/test_footguns.py, Ctrl-C at 2 s); it is kept, and the kernel's caller raises it.
    Other unraisable errors go to the hook that was there."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _swallowed.append(unraisable.exc_value)
    else:
        _outer_hook[0](unraisable)


def _raised_by_a_signal_handler(exc: SystemError) -> BaseException:
    """What to raise for a SystemError out of a kernel: a signal's Python handler that raised while the
    kernel ran (Ctrl-C: KeyboardInterrupt) left its exception set, which numba's dispatcher reports as
    "returned a result with an exception set", the handler's exception its cause. Where the handler ran
    inside a call the kernel makes back into Python (numba's `_numba_unpickle` of a constant), that
    report is itself the cause of another, and the fresh clone's Ctrl-C test ended with an internal
    error (2026-11-26): the chain of such reports is followed to the handler's exception. That one,
    else exc."""
    cause = exc
    while isinstance(cause, SystemError) and "with an exception set" in str(cause) and cause.__cause__ is not None:
        cause = cause.__cause__
    return exc if isinstance(cause, SystemError) else cause


def preload(name: str, warm: Callable[[], None]) -> None:
    """Run warm() (kernel calls on tiny arrays: numba's import and the kernels' loading from the cache,
    0.5-1 s) in a background thread, once per name in this process, while the caller goes on with work
    that releases the GIL (numpy, pyarrow). The caller checks would_run first. An error in the thread is
    dropped: the same kernel called for real raises it where it belongs. settle() waits for the thread."""
    with _lock:
        if name in _preloading:
            return
        _preloading[name] = thread = threading.Thread(target=_quietly, args=(warm,), name=f"parbpe-jit-{name}",
                                                      daemon=True)
    thread.start()


def _quietly(warm: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        warm()


def settle() -> None:
    """Wait for every preload thread: called before a fork, which copies a lock a thread holds as held."""
    for thread in list(_preloading.values()):
        thread.join()


def kernel(python: Callable | None = None, **options: Any) -> Any:
    """Declare a numba kernel: `@kernel` or `@kernel(fastmath=False, ...)` on a function in numba's subset."""
    if python is None:
        return lambda fn: Kernel(fn, options)
    return Kernel(python, options)
