"""Schedules in words: what the scheduler does with an expression, or the expression."""

import pytest
from django.utils import translation

from reminders.schedule.cron_text import describe


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("0 9 * * 1-5", "At 09:00 on Monday to Friday"),
        ("0 9 * * mon-fri", "At 09:00 on Monday to Friday"),
        ("*/15 * * * *", "Every 15 minutes"),
        ("0,15,30,45 * * * *", "Every 15 minutes"),
        ("0 9 1 * *", "At 09:00 on day 1 of the month"),
        ("0 9 1,15 * *", "At 09:00 on days 1 and 15 of the month"),
        ("0 9 1-5 * *", "At 09:00 on days 1 to 5 of the month"),
        ("0 9 * * *", "At 09:00 every day"),
        ("30 8,18 * * *", "At 08:30 and 18:30 every day"),
        ("0 9 * * 0,6", "At 09:00 on Saturday and Sunday"),
        ("0 9 * * 7", "At 09:00 on Sunday"),
        ("0 9 * * 1,3,5", "At 09:00 on Monday, Wednesday and Friday"),
        ("0 9 * * 1-3,5", "At 09:00 on Monday to Wednesday and Friday"),
        ("0 9 * * 0-6", "At 09:00 every day"),
        ("* * * * *", "Every minute"),
        ("*/1 * * * *", "Every minute"),
        ("0 * * * *", "Every hour"),
        ("5 * * * *", "At 5 minutes past the hour"),
        ("0 */2 * * *", "Every 2 hours"),
        ("0 * * * 1-5", "Every hour on Monday to Friday"),
        ("*/30 * 1 * *", "Every 30 minutes on day 1 of the month"),
        ("0 9 * 1-3 *", "At 09:00 every day, in January to March"),
        ("0 9 1 1,7 *", "At 09:00 on day 1 of the month, in January and July"),
        ("0 */6 * * *", "At 00:00, 06:00, 12:00 and 18:00 every day"),
        # 20:00 then 00:00: not "every 5 hours", but few enough times to list.
        ("0 */5 * * *", "At 00:00, 05:00, 10:00, 15:00 and 20:00 every day"),
        ("@daily", "At 00:00 every day"),
    ],
)
def test_describe__says_what_the_scheduler_does(expression, words):
    with translation.override("en"):
        assert describe(expression) == words


@pytest.mark.parametrize(
    "expression",
    [
        "0 9 15 * 1",  # day 15 *or* Mondays: cron's "or" is easy to misread
        "0 9 L * *",  # the last day of the month
        "0 9 * * 1#2",  # the second Monday
        "*/7 * * * *",  # 56 then 0: not every 7 minutes
        "*/15 9-17 * * *",  # minutes within some hours
        "0 8-20 * * *",  # 13 times a day: more than MAX_TIMES
        "not cron",
        "",
    ],
)
def test_describe__falls_back_to_the_expression_it_cannot_say_exactly(expression):
    with translation.override("en"):
        assert describe(expression) == expression


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("0 9 * * 1-5", "每周一至周五 09:00"),
        ("*/15 * * * *", "每 15 分钟"),
        ("0 9 1 * *", "每月 1 日 09:00"),
        ("0 9 * * *", "每天 09:00"),
        ("0 9 * * 1,3,5", "每周一、周三和周五 09:00"),
        ("0 9 * 1-3 *", "1月至3月：每天 09:00"),  # noqa: RUF001
        ("0 * * * 1-5", "每周一至周五，每小时整点"),  # noqa: RUF001
    ],
)
def test_describe__in_chinese(expression, words):
    with translation.override("zh-hans"):
        assert describe(expression) == words
