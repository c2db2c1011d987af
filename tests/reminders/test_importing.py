"""``reminders_import``: tasks from a CSV file as Excel writes it, all rows or none."""

# ruff: noqa: RUF001

import io
import os
import pty
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from reminders.intake import importing
from reminders.intake.importing import Defaults, ImportFailed, RowError
from reminders.models import ScheduledTask

pytestmark = pytest.mark.django_db

BOM = "\ufeff"


def csv_file(tmp_path: Path, text: str, *, bom: bool = True, name: str = "tasks.csv") -> Path:
    """``text`` as Excel's "CSV UTF-8" writes it: CRLF line ends, a BOM unless told."""
    path = tmp_path / name
    path.write_bytes(((BOM if bom else "") + text.replace("\n", "\r\n")).encode())
    return path


def run(path: Path, *args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("reminders_import", str(path), *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def failing(path: Path, *args: str) -> tuple[str, str]:
    err = io.StringIO()
    with pytest.raises(CommandError) as excinfo:
        call_command("reminders_import", str(path), *args, stdout=io.StringIO(), stderr=err)
    return str(excinfo.value), err.getvalue()


# Reading the file --------------------------------------------------------------------------


@pytest.mark.parametrize("bom", [True, False], ids=["with BOM", "without BOM"])
def test_read__a_file_with_or_without_a_bom_gives_the_same_items(tmp_path, bom):
    path = csv_file(tmp_path, "Recipient,cron,key\nalice,0 9 * * 1-5,r:alice\n", bom=bom)

    rows, errors = importing.read(importing.lines_of(path), Defaults("daily_report"))

    assert errors == []
    [row] = rows
    assert row.line == 2
    assert row.item == {
        "kind": "daily_report",
        "recipient": "alice",
        "cron": "0 9 * * 1-5",
        "tz": None,
        "key": "r:alice",
        "priority": None,
        "channel": None,
        "payload": {},
    }


def test_read__other_columns_go_to_the_payload_and_empty_cells_are_left_out(tmp_path):
    path = csv_file(
        tmp_path,
        " recipient ,at,TZ,content,Customer\n"
        "alice,2030-05-01 09:30,Europe/Berlin,Call ACME,ACME\n"
        "bob,2030-05-01T09:30+08:00,,,\n",
    )

    rows, errors = importing.read(importing.lines_of(path), Defaults("follow_up", tz="UTC"))

    assert errors == []
    first, second = (row.item for row in rows)
    assert first["at"] == datetime(2030, 5, 1, 9, 30)
    assert first["tz"] == "Europe/Berlin"
    assert first["payload"] == {"content": "Call ACME", "Customer": "ACME"}
    assert second["at"] == datetime(2030, 5, 1, 1, 30, tzinfo=UTC)
    assert (second["tz"], second["payload"]) == ("UTC", {})


def test_read__line_numbers_count_the_header_and_every_line_of_a_quoted_cell(tmp_path):
    path = csv_file(
        tmp_path,
        'recipient,cron,content\nalice,0 9 * * *,"two\nlines"\n,,\nbob,0 9 * * *,one\n',
    )
    rows, _ = importing.read(importing.lines_of(path), Defaults("daily_report"))
    assert [(row.line, row.item["recipient"]) for row in rows] == [(2, "alice"), (5, "bob")]
    assert rows[0].item["payload"] == {"content": "two\r\nlines"}


def test_read__born_gives_a_yearly_birthday_at_the_time_in_at(tmp_path):
    path = csv_file(tmp_path, "recipient,born,at\nalice,1992-02-29,08:30\nbob,1990-07-14,\n")
    rows, errors = importing.read(importing.lines_of(path), Defaults("birthday"))
    assert errors == []
    assert [row.item["cron"] for row in rows] == ["30 8 L 2 *", "0 9 14 7 *"]
    assert rows[0].item["kind"] == "birthday"


def test_read__cells_that_cannot_be_read_are_reported_by_line_and_column(tmp_path):
    path = csv_file(
        tmp_path,
        "recipient,at,born,cron\n"
        "alice,tomorrow,,\n"
        "bob,,14/07/1990,\n"
        "carol,9 am,1990-07-14,\n"
        "dave,,1990-07-14,0 9 * * *\n"
        "erin,2030-01-01 09:00,,,surplus\n",
    )
    rows, errors = importing.read(importing.lines_of(path), Defaults("birthday"))
    assert rows == []
    assert [(e.line, e.field) for e in errors] == [
        (2, "at"),
        (3, "born"),
        (4, "at"),
        (5, "cron"),
        (6, ""),
    ]
    assert "'tomorrow' is not an ISO 8601 date and time" in errors[0].message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", "line 1: The file is empty", id="empty"),
        pytest.param(
            "name,cron\nalice,0 9 * * *\n", "line 1, recipient: The header", id="no recipient"
        ),
        pytest.param("recipient,Recipient\na,b\n", "line 1, recipient: The column", id="twice"),
    ],
)
def test_read__a_header_that_cannot_be_used_fails_the_file(tmp_path, text, expected):
    path = csv_file(tmp_path, text)
    with pytest.raises(ImportFailed) as excinfo:
        importing.read(importing.lines_of(path), Defaults("daily_report"))
    assert str(excinfo.value.errors[0]).startswith(expected)


def test_read__a_file_that_is_not_csv_names_its_line(tmp_path):
    # A stray quote runs to the end of the file: one cell larger than the csv module takes.
    text = 'recipient,cron\nalice,0 9 * * *\nbob,"0 9 * * *\n' + "carol,0 9 * * *\n" * 9000
    path = csv_file(tmp_path, text)
    with pytest.raises(ImportFailed) as excinfo:
        importing.read(importing.lines_of(path), Defaults("daily_report"))
    [error] = excinfo.value.errors
    assert error.line == 3 and "not CSV" in error.message


def test_lines_of__a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "gbk.csv"
    path.write_bytes("recipient,content\nalice,ok\nbob,张三\n".encode("gbk"))
    with pytest.raises(ImportFailed) as excinfo:
        importing.lines_of(path)
    [error] = excinfo.value.errors
    assert error.line == 3 and "CSV UTF-8" in error.message


# Importing ---------------------------------------------------------------------------------


def test_import__schedules_every_row_and_upserts_by_key(tmp_path):
    path = csv_file(
        tmp_path,
        "recipient,cron,key,priority,channel\n"
        "alice,0 9 * * *,r:alice,,\n"
        "bob,0 10 * * *,r:bob,low,console\n",
    )
    out, err = run(path, "--kind", "daily_report", "--tz", "Europe/Berlin")

    assert out == "Imported 2 rows: 2 tasks created, 0 updated.\n"
    assert "Checking rows: 2 of 2" in err
    bob = ScheduledTask.objects.get(key="r:bob")
    assert (bob.priority, bob.channel, bob.timezone) == ("low", "console", "Europe/Berlin")

    path.write_bytes(path.read_bytes().replace(b"0 9 * * *", b"30 8 * * *"))
    out, _ = run(path, "--kind", "daily_report")
    assert out == "Imported 2 rows: 0 tasks created, 2 updated.\n"
    assert ScheduledTask.objects.get(key="r:alice").cron == "30 8 * * *"
    assert ScheduledTask.objects.count() == 2


def test_import__birthdays_from_a_born_column(tmp_path):
    path = csv_file(tmp_path, "recipient,born,key\nalice,1992-02-29,bday:alice\n")
    run(path, "--kind", "birthday", "--tz", "Asia/Shanghai")
    task = ScheduledTask.objects.get()
    assert (task.kind, task.cron, task.priority) == ("birthday", "0 9 L 2 *", "high")


def test_import__one_bad_row_in_a_thousand_imports_nothing_and_names_its_line(tmp_path):
    lines = ["recipient,cron,key"] + [f"m{i},0 9 * * *,r:{i}" for i in range(1000)]
    lines[638] = "@all,0 9 * * *,r:637"  # the file's line 639
    path = csv_file(tmp_path, "\n".join(lines) + "\n")

    message, err = failing(path, "--kind", "daily_report")

    assert message == "1 line cannot be imported; nothing was imported."
    [report] = [line for line in err.splitlines() if line.startswith("line ")]
    assert report.startswith("line 639, recipient: ")
    assert "means everyone" in report
    assert not ScheduledTask.objects.exists()


def test_import__reports_every_bad_row_whatever_found_it(tmp_path):
    path = csv_file(
        tmp_path,
        "recipient,at,key,content\n"
        "alice,2030-01-01 09:00,k1,hello\n"
        "bob,not a time,k2,hello\n"
        "u1|u2,2030-01-01 09:00,k3,hello\n"
        "carol,2030-01-01 09:00,k1,hello\n"
        "dave,2030-01-01 09:00,k5,\n",
    )

    message, err = failing(path, "--kind", "follow_up")

    assert message == "3 lines cannot be imported; nothing was imported."
    reported = [line.split(":")[0] for line in err.splitlines() if line.startswith("line ")]
    assert reported == ["line 3, at", "line 4, recipient", "line 5, key"]
    assert not ScheduledTask.objects.exists()


def test_import__dry_run_checks_everything_and_saves_nothing(tmp_path):
    path = csv_file(tmp_path, "recipient,cron,key\nalice,0 9 * * *,r:alice\n")
    out, _ = run(path, "--kind", "daily_report", "--dry-run")
    assert out == (
        "Dry run: 1 row checked, all good; 1 task would be created and 0 updated. "
        "Nothing was saved.\n"
    )
    assert not ScheduledTask.objects.exists()

    bad = csv_file(tmp_path, "recipient,cron\nalice,0 25 * * *\n", name="bad.csv")
    _, err = failing(bad, "--kind", "daily_report", "--dry-run")
    assert "line 2, cron: " in err


@pytest.mark.parametrize(
    ("option", "value"),
    [("--kind", "no_such_kind"), ("--tz", "Mars/Olympus"), ("--channel", "carrier_pigeon")],
)
def test_import__a_wrong_option_is_said_once(tmp_path, option, value):
    path = csv_file(tmp_path, "recipient,cron\nalice,0 9 * * *\nbob,0 9 * * *\n")
    args = {"--kind": "daily_report", option: value}
    message, err = failing(path, *(part for pair in args.items() for part in pair))
    assert message.startswith(f"{option}: ") and value in message
    assert err == ""


def test_import__a_file_that_cannot_be_read(tmp_path):
    message, err = failing(tmp_path / "missing.csv", "--kind", "daily_report")
    assert "nothing was imported" in message and "Cannot read" in err


def test_import__an_empty_table_imports_nothing(tmp_path):
    out, _ = run(csv_file(tmp_path, "recipient,cron\n"), "--kind", "daily_report")
    assert out == "Imported 0 rows: 0 tasks created, 0 updated.\n"


def test_import__draws_a_progress_bar_on_a_terminal(tmp_path):
    lines = ["recipient,cron"] + [f"m{i},0 9 * * *" for i in range(600)]
    path = csv_file(tmp_path, "\n".join(lines) + "\n")
    leader, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as terminal:
            call_command(
                "reminders_import", str(path), "--kind", "daily_report",
                stdout=io.StringIO(), stderr=terminal,
            )  # fmt: skip
        drawn = os.read(leader, 65536).decode()
    finally:
        os.close(leader)
        os.close(follower)
    assert "\rChecking rows [############" in drawn
    assert drawn.rstrip().endswith("600/600")
    assert ScheduledTask.objects.count() == 600


def test_row_error__reads_as_line_and_column():
    assert str(RowError(7, "at", "bad")) == "line 7, at: bad"
    assert str(RowError(7, "", "bad")) == "line 7: bad"
    assert str(RowError(0, "", "Cannot read it.")) == "the file: Cannot read it."


def test_import__says_it_in_chinese(tmp_path):
    from django.utils import translation

    good = csv_file(tmp_path, "recipient,cron,key\nalice,0 9 * * *,r:alice\n")
    bad = csv_file(tmp_path, "recipient,at\nbob,not a time\n", name="bad.csv")

    with translation.override("zh-hans"):
        out, err = run(good, "--kind", "daily_report")
        message, errors = failing(bad, "--kind", "follow_up")

    assert out == "已导入 1 行：新建 1 个任务，更新 0 个。\n"
    assert "正在检查：1 / 1" in err
    assert message == "1 行无法导入；未导入任何内容。"
    assert "第 2 行，at：'not a time' 不是 ISO 8601 日期时间（YYYY-MM-DD HH:MM）。" in errors
