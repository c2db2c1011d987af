#!/usr/bin/env python
"""The CRM's manage.py, as any project has it."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crmsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
