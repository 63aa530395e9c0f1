#!/usr/bin/perl

# Rotating the signing secret with key ids (sandbox_mcp_keys_file, README
# "Rotating the signing secret"): a keys file, "KID SECRET [legacy]" a
# line, read by the master at start and reload; its first key signs (the
# token's header names its kid), every key verifies the tokens that name
# it, the legacy key those that name none.  Shown on /mcp, the dashboard
# and the egress proxy's run tokens: before a rotation, after it (old and
# new tokens both work, new links carry the new kid), after the old key is
# retired (its tokens, with or without kid, are refused; the new one's
# work).  A bad keys file (too many keys, a short secret, a duplicate kid,
# a kid with odd characters, ...) stops nginx at start with the line named
# and never a secret, and a reload with one changes nothing.  smcp-token
# --keys-file signs with the first key; the nginx image's entrypoint takes
# PROXY_JWT_KEYS_FILE.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(:all);

my $t = SMCP::Test->new(
    workers     => 2,
    secret_conf => 'sandbox_mcp_keys_file %%DIR%%/keys;',
    server      => q{
        location /ui/ {
            sandbox_mcp_ui;
        }},
);

my $dir = $t->dir;
my $S1 = $t->secret;                    # the legacy key: k1
my $S2 = 'second-' . rhex(32);          # k2
my $S3 = 'third-' . rhex(32);

sub keys_file { spew("$dir/keys", join '', map { "$_\n" } @_); chmod 0600, "$dir/keys" }

keys_file('# the keys of t/keys_rotation.t', "k1 $S1 legacy");

my $eport = $t->free_port;
my $echo = $t->free_port;
local $ENV{SMCP_TEST_ECHO_KEY} = 'sk-REAL-' . rhex();

$t->start(http => egress_echo_conf($eport, $echo));

# /mcp: initialize's (status, the 401's reason)
sub mcp {
    my ($tok) = @_;
    my (undef, $r) = $t->initialize(token => $tok);
    my ($why) = ($r->{headers}{'www-authenticate'} // '') =~ /error_description="([^"]*)"/;
    return ($r->{status}, $why // '');
}

# the dashboard: a run's link (its token in the query), 303 when taken
sub dash {
    my ($run, $tok) = @_;
    return $t->http(method => 'GET', path => "/ui/runs/$run?token=$tok")->{status};
}

# the egress proxy: a model request with a run token
sub egress {
    my ($tok) = @_;
    my $r = $t->http(port => $eport, method => 'POST', path => '/echo/x',
                     headers => [ Authorization => "Bearer $tok",
                                  'Content-Type' => 'application/json' ],
                     body => '{}');
    return ($r->{status}, $r->{body} // '');
}

# a run through MCP and its watchUrl's token
sub new_run {
    my ($sid) = $t->initialize;
    my $sc = SMCP::Test::sc($t->call_tool($sid, 'opencode_run_task',
                                          { task => 'rotate', title => 'keys' })) || {};
    my ($wtok) = ($sc->{watchUrl} // '') =~ /token=([\w.-]+)/;
    return ($sc->{runId} // '', $wtok // '');
}

# tokens of every kind, signed by a key (kid => undef: the bare secret)
sub tokens {
    my ($kid, $secret, $run) = @_;
    my %k = (secret => $secret, (defined $kid ? (kid => $kid) : ()));
    return (mcp => $t->token(%k),
            ui => $t->token(%k, scope => 'ui', run => $run),
            egress => $t->token(%k, scope => 'egress', run => $run,
                                exp => time() + 900));
}

###############################################################################
# one key, the legacy one: tokens with its kid and without

my ($run1, $watch1) = new_run();
like($run1, qr/^run_[0-9a-f]{24}$/, 'a run');
is(jwt_kid($watch1), 'k1', "its watchUrl's token names the signing key, k1");
$t->redis('HSET', "smcp:run:$run1", status => 'running');

my %bare = tokens(undef, $S1, $run1);      # issued before kids
my %k1 = tokens('k1', $S1, $run1);
my %k2 = tokens('k2', $S2, $run1);
is(jwt_kid($bare{mcp}), '(none)', 'a token of the bare secret names no key');

is((mcp($bare{mcp}))[0], 200, '/mcp: a token without kid: the legacy key verifies it');
is((mcp($k1{mcp}))[0], 200, '/mcp: a token of k1');
is_deeply([ mcp($k2{mcp}) ], [ 401, 'unknown token key id' ],
          '/mcp: a token of k2, not yet a key: 401 "unknown token key id"');
is(dash($run1, $watch1), 303, 'dashboard: the watchUrl (k1) opens the run');
is((egress($k1{egress}))[0], 200, 'egress: a run token of k1 passes');
is((egress($bare{egress}))[0], 200, 'egress: a run token without kid passes');
is((egress($k2{egress}))[0], 401, 'egress: a run token of an unknown key is refused');

###############################################################################
# bad keys files: nginx does not start, the line named, no secret shown

{
    my $bdir = "$dir/bad";
    mkdir $bdir;
    mkdir "$bdir/$_" for qw(client_body_temp proxy_temp fastcgi_temp uwsgi_temp scgi_temp);
    my $many = join '', map { "k$_ $S1\n" } 1 .. 17;
    my @cases = (
        [ 'seventeen keys', $many, qr/line 17: more than 16 keys/ ],
        [ 'a secret of 31 bytes', "k1 " . substr($S1, 0, 31) . "\n",
          qr/line 1: the secret must be 32-256 bytes \(it is 31\)/ ],
        [ 'a duplicate kid', "k1 $S1\n# again\nk1 $S2\n",
          qr/line 3: key id "k1" is line 1's too/ ],
        [ 'a kid with odd characters', "k2 $S2\nk\$1 $S1 legacy\n",
          qr/line 2: the key id must be 1-32 of A-Z a-z 0-9 \. _ -/ ],
        [ 'two legacy keys', "k1 $S1 legacy\nk2 $S2 legacy\n",
          qr/line 2: a second legacy key \(line 1's is one\)/ ],
        [ 'a bare secret', "$S1\n", qr/line 1: want "KID SECRET"/ ],
        [ 'no key', "# nothing\n", qr/no key in it/ ],
    );
    for my $c (@cases) {
        my ($name, $text, $want) = @$c;
        spew("$bdir/keys", $text);
        spew("$bdir/nginx.conf", $t->render_conf(dir => $bdir, port => $t->free_port,
                                                 secret_conf => "sandbox_mcp_keys_file $bdir/keys;"));
        my ($rc, $out, $err) = run_cmd([ $t->{nginx_bin}, '-t', '-p', "$bdir/",
                                         '-c', "$bdir/nginx.conf", '-e', "$bdir/error.log" ]);
        isnt($rc, 0, "nginx -t, $name: refused");
        like($err, qr/\[emerg\].*sandbox_mcp_keys_file: keys file "\Q$bdir\E\/keys": $want/,
             '... naming the file and the line') or diag($err);
        unlike($err, qr/\Q$S1\E|\Q$S2\E|\Q${\ substr($S1, 0, 31)}\E/, '... and no secret');
    }

    spew("$bdir/nginx.conf", $t->render_conf(dir => $bdir, port => $t->free_port,
        secret_conf => "sandbox_mcp_keys_file $dir/keys; sandbox_mcp_secret_file $dir/secret;"));
    my ($rc, $out, $err) = run_cmd([ $t->{nginx_bin}, '-t', '-p', "$bdir/",
                                     '-c', "$bdir/nginx.conf", '-e', "$bdir/error.log" ]);
    isnt($rc, 0, 'nginx -t, sandbox_mcp_keys_file and sandbox_mcp_secret_file: refused');
    like($err, qr/sandbox_mcp_keys_file takes the place of sandbox_mcp_secret_file/,
         '... set one of them') or diag($err);
}

###############################################################################
# rotation: k2 signs, k1 still verifies

keys_file('# rotated', "k2 $S2", "k1 $S1 legacy");
ok($t->reload, 'reload with k2 first');

is((mcp($k2{mcp}))[0], 200, '/mcp: a token of k2, the new key');
is((mcp($k1{mcp}))[0], 200, '/mcp: a token of k1 still works');
is((mcp($bare{mcp}))[0], 200, '/mcp: a token without kid still works (legacy k1)');

my ($run2, $watch2) = new_run();
is(jwt_kid($watch2), 'k2', "a new run's watchUrl names k2");
is(dash($run2, $watch2), 303, 'dashboard: the new link opens its run');
is(dash($run1, $watch1), 303, 'dashboard: the old link (k1) still opens its run');
is(dash($run1, $k2{ui}), 303, "dashboard: a ui token of k2");

is((egress($k1{egress}))[0], 200, "egress: the running run's token (k1) keeps working");
is((egress($bare{egress}))[0], 200, 'egress: ... and one without kid');
is((egress($k2{egress}))[0], 200, 'egress: a run token of k2');

# smcp-token --keys-file: the first key signs, its kid said on stderr
{
    my ($rc, $out, $err) = run_cmd([ token_tool_path(), '--sub', 'alice',
                                     '--keys-file', "$dir/keys" ]);
    chomp $out;
    is($rc, 0, 'smcp-token --keys-file: mints') or diag($err);
    is(jwt_kid($out), 'k2', '... with the first key, k2');
    like($err, qr/^kid: k2$/m, '... said on stderr');
    is((mcp($out))[0], 200, '... and /mcp takes it');

    ($rc, $out, $err) = run_cmd([ token_tool_path(), '--sub', 'alice',
                                  '--keys-file', "$dir/keys", '--secret-file', "$dir/secret" ]);
    is("$rc $out", '2 ', 'smcp-token --keys-file and --secret-file: refused (exit 2)');
    like($err, qr/--keys-file and --secret-file: give one of them/, '... said so');

    spew("$dir/bad-keys", "k1 $S1\nk1 $S2\n");
    ($rc, $out, $err) = run_cmd([ token_tool_path(), '--sub', 'alice',
                                  '--keys-file', "$dir/bad-keys" ]);
    is("$rc $out", '1 ', 'smcp-token, a bad keys file: nothing minted (exit 1)');
    like($err, qr/keys file "\Q$dir\E\/bad-keys": line 2: key id "k1" is line 1's too/,
         '... the line named') or diag($err);
    unlike($err, qr/\Q$S1\E|\Q$S2\E/, '... no secret');
}

###############################################################################
# a reload with a bad keys file changes nothing

{
    my @workers = $t->worker_pids;
    my $k3 = $t->token(kid => 'k3', secret => $S3);
    $t->allow_log(qr/sandbox_mcp_keys_file: keys file/);
    my $n = 0;
    for my $bad ([ 'a duplicate kid', "k3 $S3", "k3 $S2", "k2 $S2", "k1 $S1 legacy" ],
                 [ 'a short secret', "k3 " . substr($S3, 0, 20), "k2 $S2", "k1 $S1 legacy" ],
                 [ 'an odd kid', "k/3 $S3", "k2 $S2", "k1 $S1 legacy" ]) {
        my ($name, @lines) = @$bad;
        keys_file(@lines);
        kill 'HUP', $t->nginx_pid;
        $n++;
        ok(wait_until(10, sub {
            (() = $t->error_log =~ /\[emerg\].*sandbox_mcp_keys_file/g) >= $n }),
           "a reload with a bad keys file ($name, k3 first): refused in the error log");
    }
    is_deeply([ $t->worker_pids ], \@workers, '... the workers are the same');
    is((mcp($k2{mcp}))[0], 200, '... k2 still verifies');
    is((mcp($k1{mcp}))[0], 200, '... and k1');
    is_deeply([ mcp($k3) ], [ 401, 'unknown token key id' ], '... k3 was not taken');
    unlike($t->error_log, qr/\Q$S1\E|\Q$S2\E|\Q$S3\E|\Q${\ substr($S3, 0, 20)}\E/,
           'no secret in the error log');
}

###############################################################################
# the nginx image's entrypoint (docker-compose): PROXY_JWT_KEYS_FILE

{
    my $signing = sub {
        my (%env) = @_;
        my $sh = 'exec() { :; }; source "$1"; signing_conf; echo "$secret_conf"';
        local %ENV = (%ENV, SMCP_RENDER_CONF => 'no', %env);
        delete local $ENV{PROXY_JWT_SECRET_FILE};
        return run_cmd([ 'bash', '-c', $sh, 'signing',
                         repo_root() . '/ngx_sandbox_mcp_module/docker-entrypoint.sh' ]);
    };
    my ($rc, $out, $err) = $signing->(PROXY_JWT_KEYS_FILE => "$dir/keys",
                                      PROXY_JWT_SECRET => 'x' x 32);
    is("$rc $out", "0 sandbox_mcp_keys_file $dir/keys;\n",
       'entrypoint: PROXY_JWT_KEYS_FILE: sandbox_mcp_keys_file, over PROXY_JWT_SECRET')
        or diag($err);
    ($rc, $out, $err) = $signing->(PROXY_JWT_KEYS_FILE => "$dir/no-keys");
    isnt($rc, 0, 'entrypoint: a keys file not there: refused');
    like($err, qr/PROXY_JWT_KEYS_FILE=\Q$dir\E\/no-keys is not readable/, '... said so');
    ($rc, $out, $err) = $signing->(PROXY_JWT_KEYS_FILE => "$dir/keys; evil");
    isnt($rc, 0, 'entrypoint: a path that would write nginx.conf: refused');
    like($err, qr/an absolute path of plain characters/, '... said so');
}

###############################################################################
# k1 retired: its tokens refused, with or without kid

keys_file("k2 $S2");
ok($t->reload, 'reload with k1 retired');

is_deeply([ mcp($k1{mcp}) ], [ 401, 'unknown token key id' ],
          '/mcp: a token of k1: 401 "unknown token key id"');
is_deeply([ mcp($bare{mcp}) ], [ 401, 'token has no key id' ],
          '/mcp: a token without kid (no legacy key left): 401 "token has no key id"');
is((mcp($k2{mcp}))[0], 200, '/mcp: a token of k2 works');

is(dash($run1, $watch1), 401, 'dashboard: the old link (k1) is refused');
is(dash($run1, $bare{ui}), 401, 'dashboard: a ui token without kid is refused');
is(dash($run2, $watch2), 303, 'dashboard: the new link (k2) opens its run');

my ($st, $body) = egress($k1{egress});
is($st, 401, "egress: the run token of k1 is refused");
like($body, qr/egress: sandbox token refused/, '... said so');
is((egress($bare{egress}))[0], 401, 'egress: a run token without kid is refused');
is((egress($k2{egress}))[0], 200, 'egress: a run token of k2 passes');

$t->done;
