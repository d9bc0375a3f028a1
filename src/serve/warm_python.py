# brig serve's warm Python: started inside a pooled jail under all its restrictions, it
# does Python's startup (site, common standard modules) ahead of a request, then waits on
# descriptor 3 for one: the program's argv, environment and directory (JSON), with its
# stdin, stdout and stderr (SCM_RIGHTS). It then behaves as `python3 ARGV...` started
# cold would: sys.argv, sys.path[0], __main__, the exit status, a traceback and status 1
# for an uncaught exception, death by SIGINT for an uncaught KeyboardInterrupt. It serves
# one request and exits; the jail goes with it. It says nothing on descriptor 3 after its
# "R": the program runs in this process and could write anything there, so brig takes
# the request's CPU time and status from the kernel, not from here.
import io, json, os, signal, socket, sys, types
import runpy, traceback, codecs, encodings.idna
import collections, functools, itertools, re, math, random, datetime, time, pathlib, typing, dataclasses, enum, string, textwrap

HERE = "<brig-warm>"


def rehearse():
    """Walks the paths a request takes once, before any request, so that their code and
    data are warm too: streams on fresh descriptors, a program compiled and run in a new
    __main__, the environment rebuilt."""
    saved = sys.stdin, sys.stdout, sys.stderr, sys.modules["__main__"], dict(os.environ)
    null = os.open(os.devnull, os.O_RDWR)
    for name, fd in (("stdin", 0), ("stdout", 1)):
        open(os.dup(null), "r" if fd == 0 else "w", encoding=getattr(sys, name).encoding).close()
    io.TextIOWrapper(open(null, "wb", buffering=0), line_buffering=True).close()
    exec(compile("pass", "<string>", "exec"), fresh_main().__dict__)
    os.environ.clear()
    os.environ.update(saved[4])
    sys.stdin, sys.stdout, sys.stderr = saved[:3]
    sys.modules["__main__"] = saved[3]


def receive():
    control = socket.socket(fileno=3)
    control.sendall(b"R")
    message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
    if not message:
        os._exit(0)
    return control, json.loads(message), fds


def take_streams(fds):
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # New stream objects, as a cold start would make for these descriptors: stdout
    # line-buffered only on a terminal, stderr always line-buffered.
    sys.stdin = sys.__stdin__ = open(0, "r", closefd=False, encoding=sys.stdin.encoding, errors=sys.stdin.errors)
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False, encoding=sys.stdout.encoding, errors=sys.stdout.errors)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        open(2, "wb", buffering=0, closefd=False), encoding=sys.stderr.encoding, errors="backslashreplace", line_buffering=True
    )


def fresh_main():
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    return main


def run(request):
    argv = request["argv"][1:]
    os.environ.clear()
    os.environ.update(dict(var.split("=", 1) for var in request["env"] if "=" in var))
    os.chdir(request["chdir"])
    sys.orig_argv = list(request["argv"])
    if argv[:1] == ["-c"]:
        sys.argv = ["-c"] + argv[2:]
        sys.path[0] = ""
        main = fresh_main()
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    elif not argv or argv[0] == "-":
        sys.argv = argv or [""]
        sys.path[0] = ""
        main = fresh_main()
        exec(compile(sys.stdin.read(), "<stdin>", "exec"), main.__dict__)
    else:
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def user_frames(tb):
    while tb is not None and tb.tb_frame.f_code.co_filename in (HERE, runpy.__file__):
        tb = tb.tb_next
    return tb


def report(error):
    """The traceback a cold start prints: the program's frames only (the hook prints the
    exception's own __traceback__)."""
    error.__traceback__ = user_frames(error.__traceback__)
    sys.excepthook(type(error), error, error.__traceback__)


def finish(status):
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            if status == 0:
                status = 120
    return status


def serve():
    rehearse()
    control, request, fds = receive()
    take_streams(fds)
    try:
        run(request)
        status = 0
    except SystemExit as exit:
        code = exit.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code & 0xFF
        else:
            print(code, file=sys.stderr)
            status = 1
    except KeyboardInterrupt as interrupt:
        report(interrupt)
        status = None
    except BaseException as error:
        report(error)
        status = 1
    # As a cold start: atexit functions run, streams are flushed, even after ^C.
    if status is None:
        finish(0)
    else:
        status = finish(status)
    if status is None:
        # Python ends an uncaught KeyboardInterrupt by dying of SIGINT (exit 130 in a shell).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


serve()
