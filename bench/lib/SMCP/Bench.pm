package SMCP::Bench;

# What bench/run and bench/profile share.

use strict;
use warnings;

use POSIX ();

use Exporter 'import';
our @EXPORT_OK = qw(quota_drain quota_drain_stop);

my $P = 'smcp:';

# No runner takes the runs here: a stand-in empties the tenant's set of
# queued runs every 20 ms, as runners' claims would, so that the quota
# (sandbox_mcp_max_queued) does not refuse the run_task load
# (tenant:{t}:started; tenant:{t}:active before issue 8).
sub quota_drain {
    my ($t) = @_;
    my $stop = $t->dir . '/quota-drain.stop';
    my $parent = $$;
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        my $c = $t->redis_connect;
        my $ten = $t->tenant;
        # until told, or until the bench is gone (killed: no stop file)
        while (!-e $stop && getppid() == $parent) {
            eval { $c->cmd('DEL', "${P}tenant:$ten:started",
                           "${P}tenant:$ten:active") };
            select(undef, undef, undef, 0.02);
        }
        POSIX::_exit(0);
    }
    return [ $pid, $stop ];
}

sub quota_drain_stop {
    my ($d) = @_;
    if (open(my $fh, '>', $d->[1])) {
        close $fh;
    }
    waitpid($d->[0], 0);
}

1;
