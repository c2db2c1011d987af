"""The translation catalogs: the committed .mo is its .po compiled, the project's
compiler reads .po files as GNU msgfmt does, the .po translates every string of the
modules and templates whose words it covers, with the same placeholders, and no other
catalog (Django's, django-q2's, the other app's) puts other words in its place."""

from __future__ import annotations

import gettext
import io
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import translation
from django.utils.translation.template import templatize

from tests.support.processes import REPO

COMPILER = REPO / "bin" / "compilemessages"
PO = REPO / "reminders" / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
OPS_PO = REPO / "ops" / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
# The standalone project's own app (reminders_demo), never installed in a CRM.
CONFIG_PO = REPO / "config" / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
# The WeCom sandbox's (wecom_sandbox), the standalone project's and the tests' only.
SANDBOX_PO = REPO / "wecom_sandbox" / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
CATALOGS = [PO, OPS_PO, CONFIG_PO, SANDBOX_PO]
# A catalog holds at least this many messages (a parse that lost some fails sooner).
FEWEST = {PO: 30, OPS_PO: 30, CONFIG_PO: 10, SANDBOX_PO: 30}
# The modules whose every translatable string each catalog covers.
TRANSLATED = {
    PO: [
        "reminders/intake/about.py",
        # Every module of the admin package.
        "reminders/admin/__init__.py",
        "reminders/admin/tasks.py",
        "reminders/admin/task_form.py",
        "reminders/admin/runs.py",
        "reminders/admin/ledger.py",
        "reminders/admin/read_only.py",
        "reminders/admin/confirm.py",
        "reminders/admin/display.py",
        "reminders/admin/preview.py",
        "reminders/admin/filters.py",
        "reminders/admin/run_now.py",
        "reminders/admin/live_preview.py",
        "reminders/admin/calendar.py",
        "reminders/admin/preferences.py",
        "reminders/admin/digests.py",
        "reminders/models/preferences.py",
        "reminders/preferences.py",
        "reminders/calendars/days.py",
        "reminders/intake/calendar_import.py",
        "reminders/management/commands/reminders_calendar.py",
        "reminders/schedule/cron_text.py",
        "reminders/apps.py",
        "reminders/calendars/backends.py",
        "reminders/checks.py",
        "reminders/conf.py",
        "reminders/intake/importing.py",
        "reminders/kinds.py",
        "reminders/management/commands/reminders_import.py",
        "reminders/management/commands/reminders_prune.py",
        "reminders/management/commands/run_reminders.py",
        "reminders/models/__init__.py",
        "reminders/models/acting.py",
        "reminders/models/choices.py",
        "reminders/models/ledger.py",
        "reminders/models/runs.py",
        "reminders/models/tasks.py",
        "reminders/models/upkeep.py",
        "reminders/models/validators.py",
        "reminders/engine/actions.py",
        "reminders/engine/cards.py",
        "reminders/engine/recall.py",
        "reminders/engine/planning.py",
        "reminders/registry.py",
        "reminders/schedule/policies.py",
        "reminders/schedule/quiet.py",
        "reminders/management/progress.py",
        "reminders/recipients.py",
        "reminders/engine/retention.py",
        "reminders/messages/stamps.py",
        "reminders/intake/users.py",
        "reminders/intake/validation.py",
        "reminders/messages/wording.py",
        "reminders/messages/cards.py",
        "reminders/messages/digests.py",
        "reminders/templates/admin/reminders/confirm.html",
        "reminders/templates/admin/reminders/recall.html",
        "reminders/templates/admin/reminders/sendlog/change_form.html",
        "reminders/templates/admin/reminders/taskrun/change_form.html",
        "reminders/templates/admin/reminders/scheduledtask/change_form.html",
        "reminders/templates/admin/reminders/scheduledtask/change_list.html",
        "reminders/templates/admin/reminders/calendarday/change_list.html",
        "reminders/templates/admin/reminders/calendarday/range.html",
        "reminders/templates/reminders/calendar_banner.html",
    ],
    OPS_PO: [
        "ops/admin.py",
        "ops/alert_cards.py",
        "ops/alert_channels.py",
        "ops/alert_texts.py",
        "ops/apps.py",
        "ops/card_clicks.py",
        "ops/card_models.py",
        "ops/checks.py",
        "ops/conf.py",
        "ops/dashboard.py",
        "ops/dashboard_page.py",
        "ops/dashboard_health.py",
        "ops/health.py",
        "ops/management/commands/ops_alerts.py",
        "ops/management/commands/ops_roles.py",
        "ops/management/commands/reminders_stats.py",
        "ops/models.py",
        "ops/morning.py",
        "ops/roles.py",
        "ops/statistics.py",
        # Every module of the stats package.
        "ops/stats/__init__.py",
        "ops/stats/breakdowns.py",
        "ops/stats/counts.py",
        "ops/stats/days.py",
        "ops/stats/failures.py",
        "ops/stats/format.py",
        "ops/stats/plan.py",
        "ops/stats/recalls.py",
        "ops/stats/runners.py",
        "ops/stats/spreads.py",
        "ops/stats/summary.py",
        "ops/stats/text.py",
        "ops/templates/ops/admin/index.html",
        "ops/templates/ops/dashboard.html",
    ],
    CONFIG_PO: [
        "config/demo.py",
        "config/demo_channel.py",
        "config/management/commands/reminders_demo.py",
    ],
    SANDBOX_PO: [
        "wecom_sandbox/management/commands/wecom_sandbox.py",
        "wecom_sandbox/page.py",
        "wecom_sandbox/words.py",
    ],
}
PLACEHOLDER = re.compile(r"%\((\w+)\)[sdr]")

compiler = runpy.run_path(str(COMPILER))


def catalog(data: bytes) -> dict[str, str]:
    return gettext.GNUTranslations(io.BytesIO(data))._catalog  # type: ignore[attr-defined]


def test_catalogs__the_compiler_finds_every_app_s():
    assert sorted(compiler["catalogs"]()) == sorted(CATALOGS)


@pytest.mark.processes
def test_mo__the_committed_one_is_its_po_compiled():
    result = subprocess.run(
        [sys.executable, str(COMPILER), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compiler__reads_context_plurals_escapes_and_leaves_out_fuzzy_and_obsolete():
    po = r"""
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

# a comment
msgctxt "title"
msgid "Open"
msgstr "打开"

msgid "Open"
msgstr "开"

#, python-format
msgid "%(n)d day"
msgid_plural "%(n)d days"
msgstr[0] "%(n)d 天"
msgstr[1] "%(n)d 天们"

msgid ""
"two \"lines\"\n"
"joined"
msgstr "两\t行"

#, fuzzy, python-format
msgid "Unsure %(x)s"
msgstr "不确定 %(x)s"

msgid "Untranslated"
msgstr ""

#~ msgid "Gone"
#~ msgstr "没了"
"""
    translations = gettext.GNUTranslations(io.BytesIO(compiler["mo"](compiler["parse"](po))))

    assert translations.pgettext("title", "Open") == "打开"
    assert translations.gettext("Open") == "开"
    assert [translations.ngettext("%(n)d day", "%(n)d days", n) for n in (1, 2)] == [
        "%(n)d 天",
        "%(n)d 天们",
    ]
    assert translations.gettext('two "lines"\njoined') == "两\t行"
    assert translations.gettext("Unsure %(x)s") == "Unsure %(x)s"
    assert translations.gettext("Untranslated") == "Untranslated"
    assert translations.gettext("Gone") == "Gone"


@pytest.mark.parametrize(
    "po",
    [
        'msgid "a"\nmsgstr "b"\nbogus "c"\n',
        'msgid "a"\nmsgstr b\n',
        'msgid "a" x\nmsgstr "b"\n',
        '"orphan"\n',
        'msgid ""\nmsgstr "Content-Type: text/plain; charset=GB2312\\n"\n',
    ],
)
def test_compiler__refuses_what_it_cannot_read(po):
    with pytest.raises(SyntaxError):
        compiler["parse"](po)


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="GNU gettext is not installed")
@pytest.mark.parametrize("po", CATALOGS, ids=lambda po: po.parts[-4])
def test_compiler__reads_the_catalog_as_gnu_msgfmt_does(tmp_path: Path, po: Path):
    gnu = tmp_path / "gnu.mo"
    subprocess.run(["msgfmt", "--check", "-o", str(gnu), str(po)], check=True)

    assert catalog(compiler["compiled"](po)) == catalog(gnu.read_bytes())


@pytest.mark.parametrize("po", CATALOGS, ids=lambda po: po.parts[-4])
def test_po__chinese_has_one_plural_form(po: Path):
    messages = compiler["parse"](po.read_text(encoding="utf-8"))
    assert "Plural-Forms: nplurals=1; plural=0;" in messages[""]
    plurals = {key: value for key, value in messages.items() if "\x00" in key}
    # The demo's few lines and the sandbox command's count nothing.
    assert plurals or po in (CONFIG_PO, SANDBOX_PO)
    assert all("\x00" not in value for value in plurals.values())


@pytest.mark.parametrize("po", CATALOGS, ids=lambda po: po.parts[-4])
def test_po__translations_keep_the_placeholders_of_their_message(po: Path):
    messages = compiler["parse"](po.read_text(encoding="utf-8"))
    assert len(messages) > FEWEST[po]
    for key, value in messages.items():
        if not key:
            continue  # the header
        source = key.split("\x04")[-1]
        wanted = {frozenset(PLACEHOLDER.findall(text)) for text in source.split("\x00")}
        for form in value.split("\x00"):
            assert frozenset(PLACEHOLDER.findall(form)) in wanted, (source, form)


@pytest.mark.skipif(shutil.which("xgettext") is None, reason="GNU gettext is not installed")
@pytest.mark.parametrize("po", CATALOGS, ids=lambda po: po.parts[-4])
def test_po__translates_every_string_of_the_modules_it_covers(tmp_path: Path, po: Path):
    pot = tmp_path / "source.pot"
    sources = []
    for name in TRANSLATED[po]:
        if name.endswith(".html"):
            # As makemessages reads a template: turned into Python that xgettext reads.
            source = tmp_path / (name.replace("/", "__") + ".py")
            text = (REPO / name).read_text(encoding="utf-8")
            source.write_text(templatize(text, origin=name), encoding="utf-8")
            sources.append(str(source))
        else:
            sources.append(str(REPO / name))
    # plural: ops/alert_texts.py marks the singular and plural of its titles with it.
    keywords = [
        "gettext_lazy",
        "gettext",
        "gettext_noop",
        "ngettext:1,2",
        "pgettext:1c,2",
        "_",
        "plural:1,2",
    ]
    subprocess.run(
        [
            "xgettext",
            "--language=Python",
            "--from-code=UTF-8",
            "--no-location",
            *(f"--keyword={keyword}" for keyword in keywords),
            "-o",
            str(pot),
            *sources,
        ],
        check=True,
    )
    # Every message of the template, "translated" so that the compiler keeps it.
    template = pot.read_text(encoding="utf-8").replace("charset=CHARSET", "charset=UTF-8")
    filled = re.sub(r'^(msgstr(\[\d\])?) ""$', r'\1 "x"', template, flags=re.MULTILINE)
    source = set(compiler["parse"](filled))
    translated = set(compiler["parse"](po.read_text(encoding="utf-8")))

    assert source - translated == set()


@pytest.mark.parametrize("po", CATALOGS, ids=lambda po: po.parts[-4])
def test_po__no_other_catalog_shadows_a_translation(po: Path):
    """Django looks a message up in every app's catalog, the first app of INSTALLED_APPS
    first (django.contrib.admin, django_q, reminders, then ops): a word another catalog
    also translates shows as that one does, so the .po must say the same."""
    messages = compiler["parse"](po.read_text(encoding="utf-8"))
    shown = {}
    with translation.override("zh-hans"):
        for key, value in messages.items():
            if not key:
                continue
            context, _, message = key.rpartition("\x04")
            singular, _, plural = message.partition("\x00")
            if plural:
                got = (
                    translation.npgettext(context, singular, plural, 1)
                    if context
                    else translation.ngettext(singular, plural, 1)
                )
            else:
                got = (
                    translation.pgettext(context, message)
                    if context
                    else translation.gettext(message)
                )
            shown[key] = (value.split("\x00")[0], got)

    assert {key: pair for key, pair in shown.items() if pair[0] != pair[1]} == {}
