#!/bin/sh
# Protected mode off unless the command line sets it, as the official image
# compiles it; a config file, when given, must stay the first argument.
set -e
if [ "$1" = redis-server ]; then
  shift
  case "${1:-} $*" in
    -v\ *|--version\ *|-h\ *|--help\ *|*--protected-mode*) ;;
    *)
      if [ -n "${1:-}" ] && [ "${1#-}" = "$1" ]; then
        conf="$1"; shift; set -- "$conf" --protected-mode no "$@"
      else
        set -- --protected-mode no "$@"
      fi ;;
  esac
  set -- redis-server "$@"
fi
exec "$@"
