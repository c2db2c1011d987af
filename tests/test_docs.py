"""The documentation (docs/), checked against the code.

**Every Python example runs.** Each fenced block of a page under docs/ (and of the
README) is one of three:

* ```` ```python ````: runs. The blocks of one page run in order in one namespace (a
  later block may use an earlier one's names), under the test settings, on the test
  database (rolled back after the page), with warnings as errors.
* ```` ```python ```` whose first line is a comment naming a Python file (``# settings.py``,
  ``# urls.py``, ``# crm/apps.py``): that file, or a fragment of it. It runs alone, in a
  fresh namespace. A settings fragment (``# settings.py``) starts from the test settings'
  names, so that ``INSTALLED_APPS += [...]`` runs; every ``REMINDERS_*``, ``OPS_*`` or
  ``WECOM_*`` name it sets must be one the settings reference documents, and every dotted
  path of ``reminders`` or ``ops`` in its values must import.
* ```` ```{code-block} python ````: shown, never run: code that only has a meaning in a
  CRM's own files (a model of its own, which no page can define). It must compile.

The pages' CRM is ``crm``: in the tests that is the stand-in CRM of tests/crm (its models
``Customer``, ``Inquiry``, ``Contract``, ``Member``), importable as ``crm`` while a page
runs. Whatever a page registers (kinds, builders, signal receivers, the admin's index
template) is undone after it. docs/README.md says the same for those who write pages.

**The reference cannot drift.** The settings reference is generated from the
``SETTINGS`` tables of ``reminders.conf`` and ``ops.conf``: a setting the code reads and
the tables miss fails here, and so does one the tables name and nothing reads. The same
for the standalone project's environment variables (``config/settings.py``), the system
checks' ids, the metrics, the signals, the API's functions and the management commands,
each against its page.
"""

from __future__ import annotations

import ast
import copy
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.utils.module_loading import import_string
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(
    path for path in DOCS.rglob("*.md") if "_build" not in path.parts and path != DOCS / "README.md"
)
PREFIXES = ("REMINDERS_", "OPS_", "WECOM_")
SETTING_NAME = re.compile(r"^(?:REMINDERS|OPS|WECOM)_[A-Z0-9_]+$")
FILE_COMMENT = re.compile(r"^#\s*([\w./-]+\.py)\b")


def page_text(relative: str) -> str:
    return (DOCS / relative).read_text(encoding="utf-8")


def relative(page: Path) -> str:
    """A page's name: its path under docs/, or under the repository (README.md)."""
    if page.is_relative_to(DOCS):
        return str(page.relative_to(DOCS))
    if page.is_relative_to(ROOT):
        return str(page.relative_to(ROOT))
    return str(page)


# -- the examples ---------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    code: str
    mode: str  # "page": runs in the page's namespace; "file": alone; "shown": compiled
    file: str = ""

    @property
    def where(self) -> str:
        page = f"docs/{relative(self.page)}" if self.page.is_relative_to(DOCS) else self.page
        return f"{page}:{self.line}"


def examples(page: Path) -> list[Example]:
    found = []
    for token in MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8")):
        if token.type != "fence" or token.map is None:
            continue
        info = token.info.split()
        line = token.map[0] + 2  # the block's first line of code, 1-based
        if info == ["{code-block}", "python"]:
            found.append(Example(page, line, token.content, "shown"))
        elif info == ["python"]:
            first = token.content.lstrip().splitlines()[0] if token.content.strip() else ""
            named = FILE_COMMENT.match(first)
            if named:
                found.append(Example(page, line, token.content, "file", named.group(1)))
            else:
                found.append(Example(page, line, token.content, "page"))
    return found


# The README's quick start runs too.
PAGES_WITH_EXAMPLES = [page for page in (*PAGES, ROOT / "README.md") if examples(page)]


def _compiled(example: Example) -> Any:
    return compile(example.code, example.where, "exec")


def _dotted_paths(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if re.fullmatch(r"(?:reminders|ops)(?:\.\w+)+", value):
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _dotted_paths(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _dotted_paths(item)


def documented_settings() -> set[str]:
    from ops.conf import SETTINGS as OPS_SETTINGS
    from reminders.conf import SETTINGS as REMINDERS_SETTINGS

    return {setting.name for setting in (*REMINDERS_SETTINGS, *OPS_SETTINGS)}


def run_settings_fragment(example: Example) -> None:
    seeded = {}
    for name in dir(django_settings):
        if name.isupper():
            try:
                seeded[name] = copy.deepcopy(getattr(django_settings, name))
            except Exception:
                seeded[name] = getattr(django_settings, name)
    namespace = dict(seeded)
    exec(_compiled(example), namespace)  # noqa: S102
    documented = documented_settings()
    for name, value in namespace.items():
        if not name.isupper() or (name in seeded and value is seeded[name]):
            continue
        if name.startswith(PREFIXES):
            assert name in documented, f"{example.where}: {name} is not a documented setting"
        for path in _dotted_paths(value):
            try:
                import_string(path)
            except ImportError as exc:
                raise AssertionError(f"{example.where}: {path} does not import: {exc}") from exc


@contextmanager
def page_undone() -> Iterator[None]:
    """What a page registers in the process is taken back after it."""
    from django.contrib import admin

    from reminders import kinds, signals
    from reminders.messages import builders, cards

    registered = dict(kinds._registry)
    decorated = dict(builders._decorated)
    hooks = dict(cards._hooks)
    all_signals = [value for value in vars(signals).values() if isinstance(value, signals.Signal)]
    receivers = {signal: list(signal.receivers) for signal in all_signals}
    index_template = admin.site.index_template
    try:
        yield
    finally:
        kinds._registry.clear()
        kinds._registry.update(registered)
        builders._decorated.clear()
        builders._decorated.update(decorated)
        cards._hooks.clear()
        cards._hooks.update(hooks)
        for signal, before in receivers.items():
            with signal.lock:
                signal.receivers[:] = before
                signal.sender_receivers_cache.clear()
        admin.site.index_template = index_template


@pytest.fixture
def crm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages' ``crm`` is the stand-in CRM of tests/crm."""
    import tests.crm
    import tests.crm.models

    monkeypatch.setitem(sys.modules, "crm", tests.crm)
    monkeypatch.setitem(sys.modules, "crm.models", tests.crm.models)


@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=relative)
def test_examples_run(page: Path, db: None, crm: None) -> None:
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    with page_undone():
        for example in examples(page):
            code = _compiled(example)
            if example.mode == "page":
                exec(code, namespace)  # noqa: S102
            elif example.mode == "file" and example.file.endswith("settings.py"):
                run_settings_fragment(example)
            elif example.mode == "file":
                exec(code, {"__name__": "docs_example"})  # noqa: S102


def test_examples__a_broken_example_fails(tmp_path: Path, db: None, crm: None) -> None:
    page = tmp_path / "broken.md"
    page.write_text(
        "```python\nfrom reminders import api\n```\n\n"
        "```python\napi.schedule('no_such_kind', 'lisi', cron='0 9 * * *')\n```\n"
        "```python\n# settings.py\nREMINDERS_TYPO = 1\n```\n"
        "```{code-block} python\nclass X(:\n```\n",
        encoding="utf-8",
    )
    found = examples(page)
    assert [example.mode for example in found] == ["page", "page", "file", "shown"]
    namespace: dict[str, Any] = {}
    exec(_compiled(found[0]), namespace)  # noqa: S102
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        exec(_compiled(found[1]), namespace)  # noqa: S102
    with pytest.raises(AssertionError, match="REMINDERS_TYPO"):
        run_settings_fragment(found[2])
    with pytest.raises(SyntaxError):
        _compiled(found[3])


# -- settings -------------------------------------------------------------------------


def _inside_setting_tables(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside ``Setting(...)`` calls: the tables name settings,
    they do not read them."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Setting"
        ):
            inside.update(id(child) for child in ast.walk(node))
    return inside


# The settings modules read ``<prefix><name>`` through ``self._get("<name>", default)``.
GET_PREFIX = {"reminders/conf.py": "REMINDERS_", "ops/conf.py": "OPS_"}


def settings_read_by_the_code() -> dict[str, set[str]]:
    """Every ``REMINDERS_*``, ``OPS_*`` and ``WECOM_*`` name the code of reminders/, ops/
    and wecom_sandbox/ reads: a string that is the name alone (``getattr(settings,
    "WECOM_API_BASE")``), an attribute (``settings.WECOM_CORP_ID``), or a settings
    module's ``_get("NAME")``."""
    found: dict[str, set[str]] = {}
    for root in ("reminders", "ops", "wecom_sandbox"):
        for path in sorted((ROOT / root).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            tree = ast.parse(path.read_text(encoding="utf-8"))
            skip = _inside_setting_tables(tree)
            for node in ast.walk(tree):
                if id(node) in skip:
                    continue
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and SETTING_NAME.match(node.value)
                ):
                    found.setdefault(node.value, set()).add(name)
                elif isinstance(node, ast.Attribute) and SETTING_NAME.match(node.attr):
                    found.setdefault(node.attr, set()).add(name)
                elif (
                    name in GET_PREFIX
                    and isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "_get"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                ):
                    setting = GET_PREFIX[name] + str(node.args[0].value)
                    found.setdefault(setting, set()).add(name)
    return found


def test_settings__every_setting_the_code_reads_is_in_the_reference() -> None:
    documented = documented_settings()
    missing = {
        name: sorted(files)
        for name, files in settings_read_by_the_code().items()
        if name not in documented
    }
    assert missing == {}


def test_settings__the_reference_names_only_settings_the_code_reads() -> None:
    assert documented_settings() - set(settings_read_by_the_code()) == set()


def test_settings__each_is_documented_once_with_a_summary() -> None:
    from ops.conf import SETTINGS as OPS_SETTINGS
    from reminders.conf import SETTINGS as REMINDERS_SETTINGS

    names = [setting.name for setting in (*REMINDERS_SETTINGS, *OPS_SETTINGS)]
    assert len(names) == len(set(names))
    assert all(setting.summary.strip() for setting in (*REMINDERS_SETTINGS, *OPS_SETTINGS))


def test_settings__the_defaults_are_the_ones_the_code_uses(settings: Any) -> None:
    """Unset, each setting the settings modules read gives the table's default (those
    whose default is said in words, or computed, apart)."""
    from ops.conf import SETTINGS as OPS_SETTINGS
    from ops.conf import settings as ops_conf
    from reminders.conf import SETTINGS as REMINDERS_SETTINGS
    from reminders.conf import settings as reminders_conf

    checked = 0
    for table, conf, prefix in (
        (REMINDERS_SETTINGS, reminders_conf, "REMINDERS_"),
        (OPS_SETTINGS, ops_conf, "OPS_"),
    ):
        for setting in table:
            attribute = setting.name.removeprefix(prefix)
            if (
                setting.default_text
                or not setting.name.startswith(prefix)
                or not hasattr(type(conf), attribute)
                or attribute == "CLUSTER"  # its defaults are said in its summary
            ):
                continue
            if hasattr(settings, setting.name):
                delattr(settings, setting.name)
            value = getattr(conf, attribute)
            if attribute == "METRICS_ALLOWED_NETWORKS":
                value = [str(network) for network in value]
            assert value == setting.default, setting.name
            checked += 1
    assert checked > 30


def test_settings__the_cluster_defaults_are_its_summary() -> None:
    from reminders.conf import CLUSTER_DEFAULTS, SETTINGS

    [cluster] = [setting for setting in SETTINGS if setting.name == "REMINDERS_CLUSTER"]
    for key, value in CLUSTER_DEFAULTS.items():
        assert f"``{key}`` {value}" in cluster.summary or f"``{key}`` ``{value}``" in (
            cluster.summary
        ), key


def environment_read_by_the_standalone_project() -> set[str]:
    """``env.str("NAME", ...)``, ``env.db("DATABASE_URL")``... in config/settings.py."""
    tree = ast.parse((ROOT / "config" / "settings.py").read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "env"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def environment_documented() -> set[str]:
    text = page_text("reference/settings.md")
    section = text.split("## The standalone project's environment", 1)[1].split("\n## ", 1)[0]
    names = set()
    for row in re.findall(r"^\| *(.+?) *\|", section, re.M):
        names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", row))
    return names


def test_environment__every_variable_the_standalone_project_reads_is_documented() -> None:
    assert environment_read_by_the_standalone_project() - environment_documented() == set()


def test_environment__the_page_names_only_variables_it_reads() -> None:
    assert environment_documented() - environment_read_by_the_standalone_project() == set()


# -- system checks, metrics, signals, the API, the commands ---------------------------


def check_ids_in_the_code() -> set[str]:
    ids = set()
    for root in ("reminders", "ops"):
        for path in (ROOT / root).rglob("*.py"):
            ids.update(re.findall(r'id="((?:reminders|ops)\.[EWCID]\d{3})"', path.read_text()))
    return ids


def ids_on_the_checks_page() -> set[str]:
    rows = re.findall(
        r"^\| *`((?:reminders|ops)\.[EWCID]\d{3})`", page_text("reference/checks.md"), re.M
    )
    return set(rows)


def test_checks__every_id_the_code_defines_is_on_the_page() -> None:
    assert {"reminders.E001", "ops.W002"} <= check_ids_in_the_code()
    assert check_ids_in_the_code() - ids_on_the_checks_page() == set()


def test_checks__the_page_lists_only_ids_the_code_defines() -> None:
    assert ids_on_the_checks_page() - check_ids_in_the_code() == set()


def metrics_in_the_code() -> set[str]:
    tree = ast.parse((ROOT / "ops" / "metrics.py").read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id.endswith("MetricFamily")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(node.args[0].value)
    return names


def metrics_on_the_page() -> set[str]:
    names = set()
    for row in re.findall(r"^\| *([^|]+)\|", page_text("reference/metrics.md"), re.M):
        names.update(re.findall(r"`((?:reminders|ops)_[a-z0-9_]+)`", row))
    return names


def test_metrics__every_metric_is_on_the_page() -> None:
    assert len(metrics_in_the_code()) >= 15
    assert metrics_in_the_code() - metrics_on_the_page() == set()


def test_metrics__the_page_lists_only_metrics_the_code_exports() -> None:
    assert metrics_on_the_page() - metrics_in_the_code() == set()


def test_signals__every_signal_is_on_the_page() -> None:
    from reminders import signals

    defined = {name for name, value in vars(signals).items() if isinstance(value, signals.Signal)}
    listed = set(re.findall(r"^\| *`(\w+)`", page_text("reference/signals.md"), re.M))
    assert defined == listed


def test_api__every_public_function_has_its_signature_on_the_page() -> None:
    from reminders import api

    shown = set(
        re.findall(
            r"<!-- reference: signature reminders\.api\.(\w+) -->", page_text("reference/api.md")
        )
    )
    assert shown == set(api.__all__)


def test_commands__every_command_is_on_the_page() -> None:
    commands = {
        path.stem
        for root in ("reminders", "ops", "wecom_sandbox")
        for path in (ROOT / root / "management" / "commands").glob("*.py")
        if path.stem != "__init__"
    }
    shown = set(
        re.findall(r"<!-- reference: django-command (\w+) -->", page_text("reference/commands.md"))
    )
    assert commands == shown


def test_models__every_status_is_on_the_page() -> None:
    text = page_text("reference/models.md")
    for path in (
        "reminders.models.ScheduledTask.Status",
        "reminders.models.TaskRun.Status",
        "reminders.models.SendLog.Status",
    ):
        assert f"<!-- reference: choices {path} -->" in text


def test_readme__every_relative_link_reaches_a_file() -> None:
    """Sphinx checks the links between pages; the README is not one of them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert len(local) > 20
    assert [link for link in local if not (ROOT / link).exists()] == []


def loggers_in_the_code() -> set[str]:
    """``logging.getLogger(__name__)`` (the module's path) and ``getLogger("name")``."""
    names = set()
    for root in ("reminders", "ops"):
        for path in (ROOT / root).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            module = module.removesuffix(".__init__")
            for argument in re.findall(r"getLogger\((__name__|\"[\w.]+\")\)", path.read_text()):
                names.add(module if argument == "__name__" else argument.strip('"'))
    return names


def test_logging__the_loggers_the_production_page_names_exist() -> None:
    text = page_text("how-to/production.md")
    section = text.split("## Logging", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`((?:reminders|ops)(?:\.\w+)*)`", section)) - {"reminders", "ops"}
    assert len(named) >= 5
    assert named - loggers_in_the_code() == set()


def test_layout__the_page_is_in_the_explanation() -> None:
    assert "layout" in page_text("explanation/index.md")
    assert page_text("explanation/layout.md").startswith("# Where things live")


def reference() -> Any:
    """``docs/_ext/reference.py``: what renders the reference pages' generated parts."""
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import reference as module
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    return module


def test_reference_pages__their_generated_parts_are_what_the_code_renders_now():
    """The parts are committed so that the pages read whole as Markdown anywhere and the
    site builds without the project; a setting, command, signature or choice changed
    without ``bin/reference`` fails here."""
    module = reference()
    pages = sorted((DOCS / "reference").glob("*.md"))
    parts = {
        page.name: len(module.PART.findall(page.read_text(encoding="utf-8"))) for page in pages
    }
    assert {name for name, n in parts.items() if n} >= {
        "api.md",
        "commands.md",
        "models.md",
        "settings.md",
    }
    stale = [
        page.name
        for page in pages
        if module.refreshed(page.read_text(encoding="utf-8")) != page.read_text(encoding="utf-8")
    ]
    assert stale == [], f"stale: {stale}; run .venv/bin/python bin/reference"


def test_reference_pages__a_part_changed_by_hand_is_rendered_anew_and_an_unknown_kind_refused():
    module = reference()
    part = "<!-- reference: choices reminders.models.TaskRun.Status -->"
    page = f"{part}\n\n| edited |\n\n<!-- /reference -->"
    fresh = module.refreshed(page)
    assert "| edited |" not in fresh and "| `sent` |" in fresh
    assert module.refreshed(fresh) == fresh
    with pytest.raises(ValueError, match="no reference part of kind 'tables'"):
        module.refreshed("<!-- reference: tables reminders.conf -->\n<!-- /reference -->")


@pytest.mark.django_db(transaction=True)
def test_tutorial__the_message_it_shows_is_the_one_the_console_channel_logs(caplog, settings):
    """The tutorial's step 4 shows the line its follow-up due in a minute makes: the
    same follow-up, sent through the console channel, logs that line but for its times
    and its run's number."""
    from django.utils import timezone

    from reminders import api
    from tests.support.jobs import tick

    settings.LANGUAGE_CODE = "en"
    settings.REMINDERS_CHANNELS = {
        "console": {"BACKEND": "reminders.senders.console.ConsoleSender"}
    }
    settings.REMINDERS_DEFAULT_CHANNEL = "console"
    caplog.set_level("INFO", logger="reminders.console")
    payload = {"customer": "Acme Ltd", "subject": "Call back about the quote"}
    api.schedule("follow_up", "lisi", at=timezone.now(), key="followup:tutorial", payload=payload)
    assert tick() == 1
    logged = [r.getMessage() for r in caplog.records if r.name == "reminders.console"]
    shown = re.findall(r"^to lisi: .*$", page_text("tutorial/first-reminder.md"), re.MULTILINE)

    def times_and_number_left_out(line: str) -> str:
        return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?|#\d+", "…", line)

    assert len(logged) == len(shown) == 1
    assert times_and_number_left_out(shown[0]) == times_and_number_left_out(logged[0])


@pytest.mark.parametrize("page", ["how-to/sandbox.md", "how-to/add-to-crm.md"])
def test_sandbox_settings__they_pass_the_system_checks_as_given(page, settings, db):
    """The settings a page gives for sending to the local sandbox are enough on their
    own: with them, no system check of the engine reports an error (its channel is
    configured, its credentials given), and follow-ups go as cards with buttons (no
    ``reminders.W008``: the callback is configured for the channel's app)."""
    from django.core import checks

    [fragment] = [
        example
        for example in examples(DOCS / page)
        if example.mode == "file" and example.file.endswith("settings.py")
    ]
    namespace: dict[str, Any] = {"INSTALLED_APPS": []}
    exec(_compiled(fragment), namespace)  # noqa: S102
    given = {name: value for name, value in namespace.items() if name.startswith(PREFIXES)}
    assert {"WECOM_API_BASE", "WECOM_CORP_ID", "REMINDERS_DEFAULT_CHANNEL"} <= set(given)
    for name, value in given.items():
        setattr(settings, name, value)
    found = [
        message
        for message in checks.run_checks(include_deployment_checks=False)
        if message.id and message.id.startswith(("reminders.", "ops."))
    ]
    errors = [str(message) for message in found if message.is_serious()]
    assert errors == []
    assert "reminders.W008" not in {message.id for message in found}


@pytest.mark.django_db(transaction=True)
def test_add_to_crm__the_line_it_shows_is_the_one_a_send_logs(caplog, settings):
    """The line the page shows ``run_reminders`` logging is the one a follow-up sent on
    a channel named ``wecom`` logs, but for the run's number."""
    from django.utils import timezone

    from reminders import api
    from tests.support.jobs import tick

    settings.REMINDERS_CHANNELS = {"wecom": {"BACKEND": "reminders.senders.memory.MemorySender"}}
    settings.REMINDERS_DEFAULT_CHANNEL = "wecom"
    caplog.set_level("INFO", logger="reminders")
    payload = {"customer": "Acme Ltd", "subject": "Send the quote"}
    task = api.schedule("follow_up", "lisi", at=timezone.now(), payload=payload)
    assert tick() == 1
    [shown] = re.findall(r"^run \d+ .*$", page_text("how-to/add-to-crm.md"), re.MULTILINE)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run ")]
    run_number = str(task.runs.get().pk)
    assert logged == [re.sub(r"^run \d+", f"run {run_number}", shown)]
