# brig's session Python: the persistent interpreter of a session's jail. Started inside the
# jail under all its restrictions (as `python3 -c "...exec(compile(sys.argv[1],
# '<brig-session>', 'exec'))" THIS_FILE`, so this file's frames are named <brig-session>),
# it does Python's startup once, says {"ready": true} on descriptor 3, then runs the cells
# the runner sends there, one JSON object per line, as a notebook does: one __main__
# namespace for all of them, the final expression's repr as the cell's result, an
# exception as the cell's error. Its own names stay out of that namespace: this file runs
# in the launcher's __main__ dict, which is no longer sys.modules["__main__"] once the
# session starts.
#
# Request: {"id": N, "code": "..."}. Reply (after the cell's stdout and stderr are flushed):
# {"id": N, "result": "repr" | null, "error": null | {"type", "message", "traceback"}},
# data only. A line that is not such a request gets an error of type ProtocolError. EOF on
# descriptor 3 ends the interpreter with status 0. The cell runs in this process and can
# write to descriptor 3 too: brig takes a reply as the cell's end only once the kernel
# shows this process's main thread back in its read of descriptor 3 (`serve` below), and
# its CPU time from the kernel (see docs/protocol.md, the trust boundary).
import ast, builtins, io, json, linecache, os, signal, socket, sys, traceback, types

# What cells commonly import, imported once here so that a cell's `import` finds them in
# sys.modules (they are not bound in the cell's namespace).
import collections, csv, datetime, functools, itertools, math, pathlib, random, re, statistics
import base64, bisect, copy, dataclasses, decimal, enum, fractions, glob, hashlib, heapq, operator
import pprint, shutil, string, struct, subprocess, tempfile, textwrap, time, typing, uuid

HERE = "<brig-session>"
CONTROL_FD = 3


class State:
    # Whether a SIGINT now interrupts a cell. Outside a cell it is dropped: the interpreter
    # waiting for a request or writing a reply must not be hit by a KeyboardInterrupt.
    interruptible = False
    cells = 0
    # The last cell was interrupted: brig killed what it started (see `reap_children`).
    interrupted = False


def on_sigint(signum, frame):
    # Runs in the main thread between two bytecodes. While `interruptible` is set the main
    # thread is inside the cell's `try` (see `execute`), so the KeyboardInterrupt is the
    # cell's; once it is cleared, the signal is ignored.
    if State.interruptible:
        raise KeyboardInterrupt


def reap_children():
    """The processes an interrupted cell started were killed by brig; until this process
    reaps them they are zombies, each holding a pid of the session's limit. Only exited
    children are reaped (WNOHANG): what is still running is left alone."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def new_main():
    """The cells' namespace: a __main__ module as the REPL's."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    return main.__dict__


def flush():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def run(code, namespace):
    """Runs one cell's code and returns the value of its final expression (None when it
    ends with a statement). The cell is compiled under a name of its own, whose source
    linecache keeps, so that a traceback through a function defined in an earlier cell
    still shows that cell's lines."""
    State.cells += 1
    name = f"<cell-{State.cells}>"
    # mtime None: linecache.checkcache keeps the entry (it has no file to compare with).
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    tree = compile(code, name, "exec", ast.PyCF_ONLY_AST)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, name, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), name, "eval"), namespace)


def execute(code, namespace):
    """Runs a cell, flushes its output; returns (result, error)."""
    try:
        State.interruptible = True
        try:
            try:
                value = run(code, namespace)
                result = None
                if value is not None:
                    namespace["_"] = value
                    result = repr(value)
            finally:
                # A cell may have replaced the handler; the session needs its own back.
                if signal.getsignal(signal.SIGINT) is not on_sigint:
                    signal.signal(signal.SIGINT, on_sigint)
                flush()
        finally:
            State.interruptible = False
    except BaseException as error:
        # A SIGINT that came between the end of the cell and `interruptible = False` lands
        # here too: it is reported as the cell's KeyboardInterrupt, never escapes.
        return None, describe(error)
    return result, None


def hide_own_frames(error, seen):
    """Drops this file's frames (the call into the cell, the SIGINT handler) from the
    tracebacks of `error` and of the exceptions chained to it or grouped in it."""
    if error is None or id(error) in seen:
        return
    seen.add(id(error))
    kept = []
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != HERE:
            kept.append(tb)
        tb = tb.tb_next
    for tb, after in zip(kept, kept[1:] + [None]):
        tb.tb_next = after
    error.__traceback__ = kept[0] if kept else None
    hide_own_frames(error.__cause__, seen)
    hide_own_frames(error.__context__, seen)
    for inner in getattr(error, "exceptions", None) or ():
        if isinstance(inner, BaseException):
            hide_own_frames(inner, seen)


def describe(error):
    """The error object: as a cold `python3` would print the traceback, minus the
    session's frames. Like the REPL, keeps it in sys.last_* (for pdb.pm())."""
    hide_own_frames(error, set())
    sys.last_type, sys.last_value, sys.last_traceback = type(error), error, error.__traceback__
    try:
        message = str(error)
    except BaseException:
        message = "<exception str() failed>"
    try:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except BaseException:
        text = f"{type(error).__name__}: {message}\n"
    return {"type": type(error).__name__, "message": message, "traceback": text}


# The most characters of a result, message or traceback a reply carries: a reply must
# stay one line of less than 1 MiB (brig takes a longer line for a broken protocol).
MAX_TEXT = 40_000


def clean(text):
    # Lone surrogates (from surrogateescape'd bytes, say) are not UTF-8: written out as
    # \udcXX text rather than breaking the reply.
    if text is None:
        return None
    if len(text) > MAX_TEXT:
        text = f"{text[:MAX_TEXT]}... [{len(text) - MAX_TEXT} more characters]"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def send(control, message):
    try:
        control.sendall((json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8"))
    except OSError:
        # The runner is gone: so is the session.
        flush()
        os._exit(0)


def reply(control, id, result, error):
    send(control, {
        "id": id,
        "result": clean(result),
        "error": error and {key: clean(value) for key, value in error.items()},
    })


def parse(line):
    """(id, code), or (id, None) and the ProtocolError for a line that is not a request."""
    try:
        request = json.loads(line)
    except ValueError as error:
        return None, {"type": "ProtocolError", "message": f"not a JSON line: {error}", "traceback": ""}
    if not isinstance(request, dict) or not isinstance(request.get("code"), str):
        id = request.get("id") if isinstance(request, dict) else None
        return id, {"type": "ProtocolError", "message": 'expected {"id": N, "code": "..."}', "traceback": ""}
    return request.get("id"), request["code"]


def rehearse():
    """Walks a cell's paths once before the first request (a result, an exception, a
    SyntaxError), so that their code is warm too."""
    scratch = {"__builtins__": builtins, "__name__": "__main__"}
    for code in ("x = 1\nx + 1", "1 / 0", "x ="):
        execute(code, scratch)
    json.dumps({"id": 0, "result": "2", "error": None})
    for name in [name for name in linecache.cache if name.startswith("<cell-")]:
        del linecache.cache[name]
    State.cells = 0
    del sys.last_type, sys.last_value, sys.last_traceback


def serve():
    signal.signal(signal.SIGINT, on_sigint)
    # The cells' children must not hold the runner's socket (nor write to it).
    os.set_inheritable(CONTROL_FD, False)
    control = socket.socket(fileno=CONTROL_FD)
    requests = control.makefile("rb")
    # As the REPL: no script name, and not this file in the arguments.
    sys.argv = [""]
    sys.orig_argv = sys.orig_argv[:1]
    rehearse()
    namespace = new_main()
    send(control, {"ready": True})
    while True:
        line = requests.readline()
        if not line:
            break
        id, code = parse(line)
        if isinstance(code, dict):
            reply(control, id, None, code)
            continue
        if State.interrupted:
            reap_children()
        result, error = execute(code, namespace)
        State.interrupted = bool(error) and error.get("type") == "KeyboardInterrupt"
        reply(control, id, result, error)
    # EOF: the session is over. Threads a cell started are not waited for.
    flush()
    os._exit(0)


serve()
