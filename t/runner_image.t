#!/usr/bin/env perl
# The sandbox image contract (docs/egress.md, "The sandbox image"), checked by
# build/smcp-runner at start, before it touches Redis: an image built FROM
# ours that keeps the contract is taken (the runner goes on to Redis); one
# that changes the entry point, runs as root, or is not built FROM ours
# (no labels) stops the runner with exit 2 and a message naming the part;
# an image not in the engine is a warning (runs fail until it is built).
#
# Then a run's own image, end to end (MCP, nginx, runner, a real
# OpenCode run): opencode_run_task's `image` must be one of nginx's
# sandbox_mcp_images (else a tool error naming them) and of the runner's
# --allowed-images (else the run fails saying so); a run naming one runs
# in it; a run naming none runs in its tenant's (sandbox_mcp_tenant_image).
# (The runner's own image, for tenants without one: every other runner
# test.)
#
# Needs root and Docker; builds small images FROM $SMCP_SANDBOX_IMAGE
# (metadata and one file: seconds) and removes them at the end.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Docker qw(ensure_docker ensure_sandbox_image docker test_id base_image
                    image_from_sandbox);
use SMCP::Stack qw(bash_step);
use SMCP::Test qw(repo_root wait_until tool_err);

ensure_docker(root => 1);
my ($base) = ensure_sandbox_image();

my $runner = repo_root() . '/build/smcp-runner';
plan(skip_all => "$runner missing (make all)") unless -x $runner;

my $dir = tempdir('smcp-runner-image-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $tag = 'smcp-byo-test:' . lc(test_id());
$tag =~ s/[^a-z0-9:_.-]/-/g;
my @built;

# byo(NAME, DOCKERFILE LINES): an image FROM the sandbox image
sub byo {
    my ($name, @lines) = @_;
    push @built, image_from_sandbox("$tag-$name", @lines);
    return $built[-1];
}

open(my $sfh, '>', "$dir/secret") or die $!;
print $sfh 'k' x 32, "\n";
close $sfh;

# runner(IMAGE) -> (exit status or undef if it still runs after its
# check, its log); a Redis address where nothing listens: a runner past
# the check says so in its log and retries
sub runner {
    my ($image) = @_;
    my $log = "$dir/runner-" . scalar(@built) . '-' . int(rand(1e6)) . '.log';
    my $pid = fork() // die "fork: $!";
    if (!$pid) {
        open(STDOUT, '>', $log) or POSIX::_exit(1);
        open(STDERR, '>&', \*STDOUT);
        exec($runner, '--image', $image, '--secret-file', "$dir/secret",
             '--redis', '127.0.0.1:1', '--egress-url', 'http://192.0.2.1:1',
             '--network', 'none', '--name', 'img-' . lc(test_id()))
            or POSIX::_exit(127);
    }
    my $status;
    my $slurp = sub { open(my $f, '<', $log) or return ''; local $/; <$f> // '' };
    wait_until(30, sub {
        if (waitpid($pid, POSIX::WNOHANG()) == $pid) { $status = $? >> 8; return 1 }
        return $slurp->() =~ /redis:/;
    }, 0.05);
    if (!defined $status) {
        kill 'TERM', $pid;
        waitpid($pid, 0);
    }
    return ($status, $slurp->());
}

my $good = byo('good', 'USER root', 'RUN echo extra > /usr/local/share/byo.txt', 'USER 1000:1000');
my ($st, $log) = runner($good);
ok(!defined $st, 'an image FROM ours that keeps the contract: the runner goes on') or diag($log);
unlike($log, qr/contract/, '... without a word about the contract');

my %bad = (
    entry => [ [ 'ENTRYPOINT ["/bin/sh"]' ], qr/its entry point must be \[\\?"\/usr\/local\/bin\/smcp-sandbox-entry\\?"\]/ ],
    root  => [ [ 'USER root' ], qr/its user must be 1000:1000/ ],
    contract => [ [ 'LABEL smcp.sandbox.contract=1' ], qr/label smcp\.sandbox\.contract is not 2/ ],
);
for my $k (sort keys %bad) {
    my $image = byo($k, @{ $bad{$k}[0] });
    my ($st, $log) = runner($image);
    is($st, 2, "$k: the runner stops (exit 2)") or diag($log);
    like($log, qr/sandbox image \Q$image\E does not follow the sandbox contract: /,
         "$k: it says the image breaks the contract");
    like($log, $bad{$k}[1], "$k: and which part") or diag($log);
    like($log, qr/build it FROM smcp-sandbox/, "$k: and what to do");
    unlike($log, qr/redis:/, "$k: before it touches Redis");
}

($st, $log) = runner(base_image());
is($st, 2, 'an image not built FROM ours: the runner stops') or diag($log);
like($log, qr/does not follow the sandbox contract/, '... saying so');

($st, $log) = runner("$tag-missing");
ok(!defined $st, 'an image not in the engine: the runner goes on') or diag($log);
like($log, qr/level=warn .*sandbox image \Q$tag\E-missing is not in the engine/,
     '... with a warning');

($st, $log) = runner('bad..name');
is($st, 2, 'a malformed image name: the runner stops') or diag($log);

##############################################################################
# a run's own image

my $other = byo('other', 'USER root', 'RUN echo other > /usr/local/share/byo.txt',
                'USER 1000:1000');
my $s = SMCP::Stack->new(
    scripts => { 'SCENARIO-IMAGE' => [
        bash_step('cat /usr/local/share/byo.txt 2>&1 || echo base image', 'Which image'),
        { text => 'Looked.' } ] },
    # the tests' tenant (alice) has a default image
    location => "sandbox_mcp_images $good $other; sandbox_mcp_tenant_image alice $good;",
);
my $r = $s->start_runner(concurrency => 2, args => [ '--allowed-images', $good ]);

my $res = $s->call('opencode_run_task', { task => 'SCENARIO-IMAGE: look', image => "$base-nope" });
tool_err($res, qr/Argument 'image' must be one of \Q$good\E, \Q$other\E/,
         'an image nginx does not offer: a tool error naming those it does');
$res = $s->call('opencode_run_task', { task => 'SCENARIO-IMAGE: look', image => 'x' x 300 });
tool_err($res, qr/image/, 'an image name too long: a tool error');

my $mine = $s->run_task(task => 'SCENARIO-IMAGE: look', image => $good, title => 'good');
my $dflt = $s->run_task(task => 'SCENARIO-IMAGE: look', title => 'default');
my $refused = $s->run_task(task => 'SCENARIO-IMAGE: look', image => $other, title => 'other');

my $done = $s->wait_done($mine->{runId}, 300);
is($done->{status}, 'completed', 'a run naming an allowed image: completed')
    or $s->diag_run($mine->{runId}, $r);
like($s->tool_output($mine->{runId}), qr/^extra$/m, '... in that image');
is($s->run_hash($mine->{runId})->{image}, $good, '... the run hash names it');
$done = $s->wait_done($dflt->{runId}, 300);
is($done->{status}, 'completed', 'a run naming none: completed');
like($s->tool_output($dflt->{runId}), qr/^extra$/m,
     '... in its tenant\'s image (sandbox_mcp_tenant_image)');
is($s->run_hash($dflt->{runId})->{image}, $good, '... the run hash names it');
$done = $s->wait_done($refused->{runId}, 300);
is($done->{status}, 'failed', 'an image nginx offers but this runner does not: failed');
like($done->{error} // '', qr/the image \Q$other\E is not one this runner offers/,
     '... saying so') or diag(explain($done));
$s->done;


