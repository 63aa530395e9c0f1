#!/usr/bin/perl

# Redis that lost the module's scripts, or is still reading its dataset
# (issue 8: a restart with a 24 MB append-only file used to leave /mcp at
# 503 "Redis is not reachable" until nginx was restarted):
#
#   - Redis restarted with a ~24 MB AOF while /mcp requests come in: while
#     it answers LOADING, requests get 503 + Retry-After saying Redis is
#     loading its dataset (nothing else: no internal error, no NOSCRIPT);
#     a few seconds after Redis is ready every request succeeds again (the
#     module reconnects with a backoff of at most 1 s; the figure printed);
#     the scripts are loaded when it is ready, also with no request coming;
#   - SCRIPT FLUSH while requests come in: no request fails (NOSCRIPT loads
#     the scripts again and the command is sent once more);
#   - no alert in error.log (the failed SCRIPT LOAD used to be one).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha1_hex);
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(json_encode json_decode wait_until repo_root lua_script);

my $t = SMCP::Test->new(workers => 2, redis_appendonly => 1);

my $cli = SMCP::Test::which_bin('redis-cli');
plan skip_all => 'redis-cli not installed (apt-get install redis-tools)'
    unless $cli || SMCP::Test::is_ci();

$t->start;

my $P = 'smcp:';
my $rdir = $t->dir . '/redis';
my $port = $t->redis_port;

# the module's scripts, as it loads them
my @SHA = map { sha1_hex(lua_script(repo_root()
                  . '/ngx_sandbox_mcp_module/common/scripts', $_)) }
          qw(session_create session_touch session_delete run_create run_cancel
             run_diff run_events);

my ($sid) = $t->initialize;
ok($sid, 'MCP session') or SMCP::Test::give_up('no session');
my $sc = SMCP::Test::sc(scalar $t->call_tool($sid, 'opencode_run_task',
                                             { task => 'recovery' }));
my $run = $sc->{runId};
ok($run, 'a run') or SMCP::Test::give_up('no run');

###############################################################################
# a large dataset: ~24 MB of plain commands (no RDB preamble) in the AOF

{
    $t->redis('CONFIG', 'SET', 'appendfsync', 'no');
    $t->redis('CONFIG', 'SET', 'aof-use-rdb-preamble', 'no');
    my $v = 'v' x 64;
    open(my $fh, '|-', "$cli -p $port --pipe >/dev/null") or die "redis-cli: $!";
    for my $i (1 .. 230000) {
        my $k = "${P}fill:$i";
        printf $fh "*3\r\n\$3\r\nSET\r\n\$%d\r\n%s\r\n\$%d\r\n%s\r\n",
               length $k, $k, length $v, $v;
    }
    close $fh;
    ok($t->redis('DBSIZE') > 230000, 'filled');
    $t->redis('BGREWRITEAOF');
    ok(wait_until(30, sub {
        my $i = $t->redis('INFO', 'persistence');
        return $i =~ /aof_rewrite_in_progress:0/ && $i =~ /aof_rewrite_scheduled:0/;
    }), 'AOF rewritten');
    my $size = 0;
    $size += -s $_ for glob("$rdir/appendonlydir/*.aof");
    ok($size > 20e6, sprintf('the AOF holds %.1f MB', $size / 1e6));
}

###############################################################################
# helpers

# children sending /mcp requests (ping: the session script; get_events:
# two scripts) until told to stop, each answer one line: time, HTTP
# status, Retry-After, the JSON-RPC error message or "ok"
sub load_start {
    my ($n) = @_;
    my (@kids, $parent);
    $parent = $$;
    for my $k (1 .. $n) {
        my $out = $t->dir . "/load.$k";
        my $pid = fork();
        die "fork: $!" unless defined $pid;
        if ($pid == 0) {
            open(my $fh, '>', $out) or POSIX::_exit(1);
            $fh->autoflush(1);
            my $i = 0;
            # until told to stop, or the test is gone
            while (!-e $t->dir . '/load.stop' && getppid() == $parent) {
                my $t0 = time();
                my (undef, $r) = $i++ % 2
                    ? $t->call_tool($sid, 'opencode_get_events', { runId => $run },
                                    timeout => 5)
                    : (undef, $t->rpc($sid, 'ping', {}, timeout => 5));
                my $j = ref $r->{json} eq 'HASH' ? $r->{json} : {};
                my $what = $j->{error} ? "error $j->{error}{message}"
                         : ref $j->{result} eq 'HASH' && !$j->{result}{isError}
                           ? 'ok' : 'bad ' . substr($r->{body} // '', 0, 200);
                printf $fh "%.3f\t%s\t%s\t%s\n", $t0, $r->{status},
                       $r->{headers}{'retry-after'} // '-', $what;
                sleep(0.01);
            }
            close $fh;
            POSIX::_exit(0);
        }
        push @kids, [ $pid, $out ];
    }
    return \@kids;
}

# the answers the children have written so far (lines, as load_stop
# splits them)
sub load_lines {
    my ($kids) = @_;
    return map { [ split /\t/ ] } map { split /\n/, $t->read_file($_->[1]) } @$kids;
}

# each child's answers so far
sub load_counts {
    my ($kids) = @_;
    return map { my @l = split /\n/, $t->read_file($_->[1]); scalar @l } @$kids;
}

# wait until every child has $n more answers than in @before (0 before)
sub load_more {
    my ($kids, $n, @before) = @_;
    return wait_until(60, sub {
        my @now = load_counts($kids);
        return !grep { $now[$_] < ($before[$_] // 0) + $n } 0 .. $#now;
    }, 0.02);
}

sub load_stop {
    my ($kids) = @_;
    open(my $fh, '>', $t->dir . '/load.stop') or die;
    close $fh;
    waitpid($_->[0], 0) for @$kids;
    unlink $t->dir . '/load.stop';
    my @lines;
    for my $k (@$kids) {
        push @lines, map { [ split /\t/ ] } split /\n/, $t->read_file($k->[1]);
        unlink $k->[1];
    }
    return sort { $a->[0] <=> $b->[0] } @lines;
}

# redis-server started again on the same data, not waiting for it
sub restart_redis {
    $t->stop_redis;
    my $t0 = time();
    $t->{redis_pid} = $t->spawn('redis-server', "$rdir/stdout.log",
                                 $t->{redis_bin}, "$rdir/redis.conf");
    my ($loading, $ready);
    ok(wait_until(30, sub {
        my $c = eval { SMCP::Test::Redis->new(port => $port, timeout => 1) }
            or return 0;
        my $r = eval { $c->send_cmd('PING'); $c->read_reply(1) };
        $loading++ if ref $r eq 'SMCP::Test::Redis::Error' && $r->{error} =~ /^LOADING/;
        return defined $r && !ref $r && $r eq 'PONG';
    }, 0.01), 'Redis is back');
    $ready = time();
    delete $t->{redis_conn};
    return ($ready, $loading, $ready - $t0);
}

sub scripts_loaded {
    my $r = $t->redis('SCRIPT', 'EXISTS', @SHA);
    return !grep { !$_ } @$r;
}

###############################################################################
# a restart while requests come in

# requests sent this long after Redis was ready must all be answered: a
# few times the module's reconnect backoff (1 s), not a restart of nginx
my $LATE = 3;

{
    my $kids = load_start(3);
    ok(load_more($kids, 1), 'the requests come in');
    my ($ready, $loading, $took) = restart_redis();
    diag(sprintf('Redis answered LOADING %d times over %.2f s', $loading // 0, $took));
    ok(wait_until(60, sub { (grep { $_->[0] >= $ready + $LATE } load_lines($kids)) > 20 },
                  0.1), "requests sent $LATE s after Redis was ready");
    my @l = load_stop($kids);

    my @bad = grep {
        !($_->[1] == 200 && $_->[3] eq 'ok')
        && !($_->[1] == 503 && $_->[2] eq '1'
             && $_->[3] =~ /^error Storage unavailable: Redis is (loading its dataset|not reachable); retry shortly$/)
    } @l;
    ok(@l > 50, scalar(@l) . ' requests answered');
    ok(!@bad, 'each got its answer, or 503 + Retry-After saying why')
        or diag(join("\n", map { join(' ', @$_) } @bad[0 .. ($#bad < 9 ? $#bad : 9)]));
    my @loading = grep { $_->[3] =~ /loading its dataset/ } @l;
    ok(@loading, scalar(@loading) . ' got 503 "Redis is loading its dataset"')
        or diag('Redis answered LOADING ' . ($loading // 0) . ' times to the probe');
    my @late = grep { $_->[0] >= $ready + $LATE } @l;
    ok(@late > 20, scalar(@late) . " requests sent $LATE s after Redis was ready");
    is(scalar(grep { $_->[3] ne 'ok' } @late), 0, '... all answered');
    my ($last_bad) = reverse grep { $_->[3] ne 'ok' } @l;
    my $rec = $last_bad ? $last_bad->[0] - $ready : -1;
    ok($rec < $LATE, sprintf('the last request not answered was sent %.2f s '
                             . 'after Redis was ready', $rec));
    ok(scripts_loaded(), 'the scripts are in Redis');
}

###############################################################################
# a restart with no request coming: the scripts are loaded once it is ready

{
    my ($ready, $loading) = restart_redis();
    ok(wait_until(30, \&scripts_loaded, 0.05), 'the scripts are loaded with no request');
    my $after = time() - $ready;
    # by the module on its own: its reconnect (backoff at most 1 s) loads
    # them, no request has to come first
    ok($after < 10, sprintf('... %.2f s after Redis was ready', $after));
    my $r = $t->rpc($sid, 'ping', {});
    is($r->{status}, 200, 'and /mcp answers');
}

###############################################################################
# SCRIPT FLUSH while requests come in

{
    my $kids = load_start(3);
    ok(load_more($kids, 1), 'the requests come in');
    # each flush met by requests (three of each child's) before the next
    for (1 .. 6) {
        my @n = load_counts($kids);
        $t->redis('SCRIPT', 'FLUSH');
        load_more($kids, 3, @n) or fail("requests after flush $_");
    }
    my @l = load_stop($kids);
    ok(@l > 50, scalar(@l) . ' requests answered');
    my @bad = grep { $_->[1] != 200 || $_->[3] ne 'ok' } @l;
    is(scalar @bad, 0, 'none lost to NOSCRIPT')
        or diag(join("\n", map { join(' ', @$_) } @bad[0 .. ($#bad < 9 ? $#bad : 9)]));
    ok(scripts_loaded(), 'the scripts are in Redis again');
    my $log = $t->read_file($t->dir . '/error.log');
    like($log, qr/the scripts are gone from Redis \(NOSCRIPT\): loading them again/,
         'error.log says why it loaded them again');
}

$t->done;
