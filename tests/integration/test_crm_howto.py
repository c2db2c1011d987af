"""docs/how-to/add-to-crm.md, followed from its own code blocks.

A fresh directory, the CRM's virtualenv with the wheel installed (``crm_python``, the
page's ``pip install``), and then each block of the page in order, as a developer
would copy it:

* a Python block whose first line names a file (``# crm/models.py``) is that file,
  written whole; ``# crmsite/settings.py, at the end`` is appended to it;
* a Python block that starts ``# python manage.py shell`` runs in the project's shell;
* each command of an ``sh`` block runs in the project: ``python`` and ``django-admin``
  are the virtualenv's; ``make sandbox`` runs in this checkout; ``runserver``,
  ``run_reminders`` and ``make sandbox`` keep running, in sessions of their own.

The only changes: free ports instead of the page's 8000 and 8900, and ``--noreload`` for
``runserver``. Before the page's last block (which reads the click's effect), the test
clicks the card's "Done" on the sandbox as the page says to, over the sandbox's HTTP
API (``POST /sandbox/click``, what its page's button posts). What must hold: the card
reached the follow-up's owner, with the page's buttons; the click came back to the CRM's
receiver; the card then reads what the page says; ``run_reminders`` logged the line the
page shows; and everything the page runs exits 0 with no system-check error.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from markdown_it import MarkdownIt

from tests.support.crm_venv import IN_ONE_RUN, run
from tests.support.processes import (
    KNOBS,
    REPO,
    ReminderProcess,
    alive,
    kill_tree,
    spawn,
    wait_until,
)

pytestmark = [
    pytest.mark.processes,
    # As the throwaway CRM project (tests/integration/test_crm_project.py): the wheel is
    # installed once, in the PostgreSQL run under Django 5.2. The page's project is on
    # SQLite, as startproject makes it, whichever server the suite runs on.
    IN_ONE_RUN,
]

PAGE = REPO / "docs" / "how-to" / "add-to-crm.md"
FILE = re.compile(r"^#\s*([\w./-]+\.py)(, at the end)?\s*$")
SHELL = "# python manage.py shell"
LONG_RUNNING = ("make sandbox", "manage.py runserver", "manage.py run_reminders")
WAIT = 90


def long_running(command: str) -> bool:
    return any(part in command for part in LONG_RUNNING)


@dataclass(frozen=True)
class Step:
    kind: str  # "file", "append", "shell" or "command"
    text: str
    path: str = ""


def steps(page: Path) -> list[Step]:
    """The page's blocks the test follows, in order; ``text`` blocks and others shown
    for reading only are left out."""
    found: list[Step] = []
    for token in MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8")):
        if token.type != "fence":
            continue
        info = token.info.split()
        if info in (["python"], ["{code-block}", "python"]):
            first = token.content.splitlines()[0]
            named = FILE.match(first)
            if first.strip() == SHELL:
                found.append(Step("shell", token.content))
            elif named:
                kind = "append" if named.group(2) else "file"
                found.append(Step(kind, token.content, named.group(1)))
        elif info == ["sh"]:
            joined = token.content.replace("\\\n", " ")
            for line in joined.splitlines():
                command = line.split("#", 1)[0].strip()
                if command:
                    found.append(Step("command", command))
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Project:
    directory: Path
    python: Path
    env: dict[str, str]
    sandbox_port: int
    web_port: int

    def argv(self, command: str) -> list[str]:
        words = shlex.split(command)
        bin_dir = self.python.parent
        if words[0] == "python":
            words[0] = str(self.python)
        elif words[0] == "django-admin":
            words[0] = str(bin_dir / "django-admin")
        return words

    def shell(self, code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), "manage.py", "shell", "-c", code],
            cwd=self.directory,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    def start(self, command: str) -> ReminderProcess:
        """A process that keeps running, in a session of its own."""
        if command == "make sandbox":
            argv = [
                "make",
                "--no-print-directory",
                "sandbox",
                f"SANDBOX_PORT={self.sandbox_port}",
                f"CALLBACK_URL=http://127.0.0.1:{self.web_port}/reminders/wecom/callback",
            ]
            cwd, env = REPO, self.checkout_env()
        else:
            argv = self.argv(command)
            if "runserver" in argv:
                argv += [f"127.0.0.1:{self.web_port}", "--noreload"]
            cwd, env = self.directory, self.env
        name = argv[2] if argv[1] == "manage.py" else "sandbox"
        return spawn(name, argv, cwd=cwd, env=env, workdir=self.directory)

    def checkout_env(self) -> dict[str, str]:
        """The checkout's own environment for ``make sandbox``: none of the suite's
        settings, nor the outer make's jobs."""
        drop = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTHONPATH", *KNOBS}
        return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("WECOM_")}

    def output(self, name: str) -> str:
        return (self.directory / f"{name}.stdout").read_text(errors="replace")

    def sandbox(self, path: str, **kwargs: Any) -> Any:
        url = f"http://127.0.0.1:{self.sandbox_port}{path}"
        method = requests.post if "json" in kwargs else requests.get
        answer = method(url, timeout=10, **kwargs)
        answer.raise_for_status()
        return answer.json()


def answers(url: str) -> bool:
    try:
        requests.get(url, timeout=2)
    except requests.RequestException:
        return False
    return True


def test_the_page_s_blocks_are_what_the_test_follows():
    """The page says what the test relies on: the files, the commands, the shell."""
    found = steps(PAGE)
    kinds = [(step.kind, step.path) for step in found if step.kind != "command"]
    assert kinds == [
        ("file", "crm/models.py"),
        ("append", "crmsite/settings.py"),
        ("file", "crmsite/urls.py"),
        ("file", "crm/receivers.py"),
        ("file", "crm/apps.py"),
        ("shell", ""),
        ("shell", ""),
    ]
    commands = [step.text for step in found if step.kind == "command"]
    assert commands[0].startswith("pip install ") and "django-wecom-reminders" in commands[0]
    assert [c for c in commands if long_running(c)] == [
        "make sandbox",
        "python manage.py runserver",
        "python manage.py run_reminders",
    ]


def test_from_a_fresh_project_to_a_card_delivered_and_clicked(crm_python, tmp_path):
    directory = tmp_path / "crm"
    directory.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in KNOBS and k != "PYTHONPATH"}
    env.update(
        PYTHONUNBUFFERED="1",
        PATH=f"{crm_python.parent}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(crm_python.parent.parent),
    )
    env = {k: v for k, v in env.items() if not k.startswith(("WECOM_", "REMINDERS_"))}
    project = Project(directory, crm_python, env, free_port(), free_port())
    found = steps(PAGE)
    last_shell = max(i for i, step in enumerate(found) if step.kind == "shell")
    started: list[ReminderProcess] = []
    try:
        for index, step in enumerate(found):
            text = step.text.replace("127.0.0.1:8900", f"127.0.0.1:{project.sandbox_port}")
            if step.kind == "file":
                (directory / step.path).write_text(text)
            elif step.kind == "append":
                with (directory / step.path).open("a") as settings_file:
                    settings_file.write("\n" + text)
            elif step.kind == "command" and text.startswith("pip install"):
                continue  # crm_python: the wheel, installed as the page says
            elif step.kind == "command" and long_running(text):
                started.append(project.start(text))
                wait_for_start(project, started)
            elif step.kind == "command":
                done = run(project.argv(text), cwd=directory, env=env)
                assert "ERRORS:" not in done.stderr, done.stderr
            elif index == last_shell:
                click_done(project, started)
                wait_until(
                    lambda code=text: project.shell(code).returncode == 0,
                    timeout=WAIT,
                    what="the page's last block to pass: the click told the CRM",
                    processes=started,
                    explain=lambda code=text: project.shell(code).stderr[-2000:],
                )
            else:
                done = project.shell(text)
                assert done.returncode == 0, done.stderr
        # The line the page shows run_reminders logging for the send.
        [shown] = re.findall(r"^run \d+ \(.*$", PAGE.read_text(), re.MULTILINE)
        engine = next(p for p in started if p.name == "run_reminders")
        logged = r"run \d+ " + re.escape(shown.split(" ", 2)[2])
        assert re.search(logged, engine.stderr(20000)), engine.describe()
    finally:
        for process in started:
            if process.popen.poll() is None or alive(process.descendants_seen()):
                kill_tree(process)


def wait_for_start(project: Project, started: list[ReminderProcess]) -> None:
    process = started[-1]
    if process.name == "sandbox":
        wait_until(
            lambda: "WECOM_API_BASE=" in project.output("sandbox"),
            timeout=WAIT,
            what="the sandbox to listen",
            processes=started,
            explain=process.describe,
        )
    elif process.name == "runserver":
        wait_until(
            lambda: answers(f"http://127.0.0.1:{project.web_port}/healthz"),
            timeout=WAIT,
            what="the CRM's runserver to answer",
            processes=started,
            explain=process.describe,
        )


def click_done(project: Project, started: list[ReminderProcess]) -> None:
    """What the page's step 9 says to do: find the card to lisi, click Done."""

    def card() -> dict[str, Any] | None:
        for entry in project.sandbox("/sandbox/messages")["messages"]:
            if entry["msgtype"] == "template_card" and "lisi" in entry["delivered_to"]:
                return dict(entry)
        return None

    entry = wait_until(
        card,
        timeout=WAIT,
        what="the follow-up's card in the sandbox",
        processes=started,
        explain=lambda: "\n".join(p.describe() for p in started),
    )
    page = PAGE.read_text()
    sent = entry["request"]["template_card"]
    assert "Acme Ltd" in str(sent) and "Send the quote" in str(sent), sent
    buttons = [button["text"] for button in sent["button_list"]]
    assert all(f'"{text}"' in page for text in buttons), buttons
    clicked = project.sandbox("/sandbox/click", json={"entry": entry["id"], "key": "done"})
    assert (clicked["status"], clicked["body"]) == (200, "success"), clicked

    def updated() -> str:
        for later in project.sandbox("/sandbox/messages")["messages"]:
            if later["id"] == entry["id"] and later.get("card_update"):
                return str(later["card_update"].get("replace_name", ""))
        return ""

    replaced = wait_until(
        updated, timeout=WAIT, what="the card's update after the click", processes=started
    )
    assert f'"{replaced}"' in page, f"the page does not show the card's {replaced!r}"
