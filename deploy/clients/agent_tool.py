#!/usr/bin/env python3
"""An LLM agent's code tool on brig sessions: `execute_python(code)`.

    python3 agent_tool.py [SOCKET]     # a three-step demo conversation against `brig serve`
    python3 agent_tool.py --schema     # the tool's definition, for OpenAI and for Anthropic

The model calls the tool with Python code; `PythonTool` runs it in the conversation's own
`brig_client.Sandbox` (one brig session per conversation, created at its first call), so
variables, imports and files live on between calls as in a notebook. The model gets back
a compact JSON text: what the code printed, the value of its last expression, the error
it raised, each cut to a few thousand characters. SOCKET defaults to `$BRIG_SERVER`, else
/run/brig/brig.sock. Needs brig_client (clients/python in the brig repository, found
from here when it is not installed).
"""

import json
import os
import sys

try:
    import brig_client
except ImportError:  # run from a checkout: the client is in clients/python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
    import brig_client

NAME = "execute_python"
DESCRIPTION = (
    "Run Python 3 code in a persistent sandbox, like a notebook cell: variables, imports "
    "and files persist between calls. Files are in /home/sandbox (the working directory). "
    "Returns JSON with `stdout`, `stderr`, `result` (the repr of the last expression) and "
    "`error` (the traceback). There is no network access."
)
PARAMETERS = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "The Python code to run."}},
    "required": ["code"],
}
# The same tool in the two common function-calling shapes.
OPENAI_TOOL = {"type": "function", "function": {"name": NAME, "description": DESCRIPTION, "parameters": PARAMETERS}}
ANTHROPIC_TOOL = {"name": NAME, "description": DESCRIPTION, "input_schema": PARAMETERS}

MAX_FIELD = 4000  # characters of each field the model sees


def trim(text, limit=MAX_FIELD):
    """`text` cut in the middle to at most about `limit` characters (its start and its end
    say the most: the first lines printed, the last lines of a traceback)."""
    if text is None or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters cut] ...\n{text[-half:]}"


class PythonTool:
    """`execute_python` for many conversations: one Sandbox each, until `close`."""

    def __init__(self, socket=None, options=None, timeout="30s", idle_timeout="10m"):
        self.socket = socket
        # The server's defaults (its --memory, --pids, --time-limit) hold unless a
        # conversation's sandbox asks for tighter ones, e.g. {"memory": "512M"}.
        self.options = options or {}
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.sandboxes = {}

    def sandbox(self, conversation):
        """The conversation's Sandbox, created at its first use."""
        if conversation not in self.sandboxes:
            self.sandboxes[conversation] = brig_client.Sandbox(
                socket=self.socket, options=self.options, idle_timeout=self.idle_timeout)
        return self.sandboxes[conversation]

    def execute_python(self, conversation, code):
        """The tool's handler: runs `code`, returns the JSON text the model reads."""
        notes = []
        try:
            try:
                execution = self.sandbox(conversation).run_code(code, timeout=self.timeout)
            except brig_client.BrigError as error:
                if "no session" not in error.message:
                    raise
                # It sat idle too long: a new one, and the model must know its state is gone.
                del self.sandboxes[conversation]
                notes.append("the sandbox had expired and was started again: earlier variables and files are gone")
                execution = self.sandbox(conversation).run_code(code, timeout=self.timeout)
        except brig_client.BrigError as error:
            return json.dumps({"error": f"the sandbox is unavailable: {error.message}"})
        if execution.state_lost:
            notes.append("the interpreter was restarted: earlier variables are gone, files remain")
        if execution.status not in ("ok", "nonzero_exit"):
            notes.append(f"stopped: {execution.status} (limit {self.timeout})" if execution.status == "timeout"
                         else f"stopped: {execution.status}")
        reply = {
            "stdout": trim(execution.stdout),
            "stderr": trim(execution.stderr),
            "result": trim(execution.result),
            "error": trim(execution.error.traceback or str(execution.error)) if execution.error else None,
            "note": "; ".join(notes) or None,
        }
        return json.dumps({key: value for key, value in reply.items() if value})

    def call(self, conversation, name, arguments):
        """Dispatches a tool call as a model sends it: OpenAI's arguments are a JSON text,
        Anthropic's `input` an object."""
        if name != NAME:
            return json.dumps({"error": f"no tool {name!r}"})
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        return self.execute_python(conversation, arguments["code"])

    def close(self, conversation):
        """Ends the conversation: its sandbox and its files go."""
        sandbox = self.sandboxes.pop(conversation, None)
        if sandbox is not None:
            sandbox.close()


SALES = "region,amount\nnorth,12.5\nsouth,40\neast,30.5\nwest,42\n"

# A conversation as a model would hold it: the user's turns and the tool calls the model
# answers them with (scripted here, so that the demo runs without a model).
DEMO = [
    ("Here is sales.csv. How many rows does it have?",
     "import csv\nrows = list(csv.DictReader(open('/home/sandbox/data/sales.csv')))\nlen(rows)"),
    ("What is the mean amount?",
     "mean = sum(float(row['amount']) for row in rows) / len(rows)\nmean"),
    ("Print it with two decimals.",
     "print(f'mean amount: {mean:.2f}')"),
]


def demo(socket):
    tool = PythonTool(socket)
    conversation = "demo"
    # The user's upload goes straight into the conversation's workspace.
    tool.sandbox(conversation).files.write("data/sales.csv", SALES)
    failed = False
    try:
        for step, (question, code) in enumerate(DEMO, 1):
            print(f"user: {question}")
            print(f"assistant: {NAME}({json.dumps({'code': code})})")
            content = tool.call(conversation, NAME, json.dumps({"code": code}))
            print(f"tool: {content}")
            failed = failed or "error" in json.loads(content)
    finally:
        tool.close(conversation)
    return 1 if failed else 0


def main(argv):
    if argv[1:2] == ["--schema"]:
        print(json.dumps({"openai": OPENAI_TOOL, "anthropic": ANTHROPIC_TOOL}, indent=2))
        return 0
    try:
        return demo(argv[1] if len(argv) > 1 else None)
    except brig_client.BrigError as error:
        print(f"agent_tool.py: {error.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
