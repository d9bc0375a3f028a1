# brig's session bash: the persistent shell of a session's bash context. Started inside the
# jail under all its restrictions (as `bash --noprofile --norc -c THIS_FILE`), it says
# {"ready":true} on descriptor 3, then runs the cells the runner sends there in this very
# shell, so that the working directory, variables, functions, options and exported
# environment live on between cells.
#
# Request: the cell's id on a line, then its code up to a NUL byte (bash has no JSON
# parser; the code cannot hold a NUL, brig refuses one). Reply: {"id":N,"exit_code":S},
# S the status of the cell's last command, data only. EOF on descriptor 3 ends the shell.
#
# The cell runs with descriptor 3 closed (`3>&-`): the commands it starts never hold the
# socket; bash keeps its own copy on a descriptor of 10 or more, close-on-exec, which only
# the shell itself (a builtin of the cell) could write to, and the runner takes a reply as
# the cell's end only once the kernel shows this shell back in its read of descriptor 3
# (see docs/protocol.md, the trust boundary).
#
# SIGINT (the time limit): the cell is sourced with a trap that returns from it, so the
# shell and its state stay; the commands the cell runs are killed by the runner's sweep.
# Outside a cell SIGINT is ignored. A cell that runs `exit` (or fails under `set -e`) ends
# the shell: the next cell starts a fresh one, its state lost.
#
# `builtin`: a cell may define functions named read, printf, source, trap or unset for
# its own use; the loop still uses bash's own.
builtin trap '' INT
builtin printf '{"ready":true}\n' >&3
while IFS= builtin read -r -u 3 __brig_cell && IFS= builtin read -r -d '' -u 3 __brig_code; do
    builtin trap 'return 130' INT
    # The code from a here-string (a pipe while it is under 64 KiB): `source` reads all
    # of it before it runs any, and `return` in the trap ends it.
    builtin source /dev/fd/4 3>&- 4<<<"$__brig_code"
    __brig_status=$?
    builtin trap '' INT
    builtin unset __brig_code
    builtin printf '{"id":%d,"exit_code":%d}\n' "$__brig_cell" "$__brig_status" >&3
done
builtin exit 0
