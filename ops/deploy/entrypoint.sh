#!/bin/sh
# The image's entrypoint: picks the role from the first argument and execs it, so the
# process gets the signals itself (tini, PID 1, forwards them).
#   scheduler  python manage.py run_reminders
#   alerts     python manage.py ops_alerts --loop
#   web        gunicorn on $PORT (8000), $WEB_WORKERS workers (2)
#   *          python manage.py "$@"
# MIGRATE_ON_START=1 runs `migrate` first. Set it on one container of a deployment (or
# run `migrate` as a job of its own before the others start): migrations written for
# this project are safe with old processes still running (README, "Upgrades").
set -eu

cd "${REMINDERS_APP_DIR:-/app}"
PYTHON=${PYTHON:-python}

if [ "${MIGRATE_ON_START:-0}" = "1" ]; then
    "$PYTHON" manage.py migrate --noinput
fi

role=${1:-scheduler}
[ $# -gt 0 ] && shift
case $role in
    scheduler) exec "$PYTHON" manage.py run_reminders "$@" ;;
    alerts) exec "$PYTHON" manage.py ops_alerts --loop "$@" ;;
    web)
        exec "$PYTHON" -m gunicorn config.wsgi:application \
            --bind "0.0.0.0:${PORT:-8000}" --workers "${WEB_WORKERS:-2}" \
            --access-logfile - "$@"
        ;;
    *) exec "$PYTHON" manage.py "$role" "$@" ;;
esac
