package SMCP::Scheduler;
# TAP::Parser::Scheduler with a cap (SMCP::Harness's): at most `limit` of
# the files `heavy` names run at once.  A sequence whose next file is held
# waits; the files of other sequences go on (prove's other slots take the
# light files meanwhile).  The rules (par, seq) are the base class's.
#
#   SMCP::Scheduler->new(tests => [...], rules => {...},
#                        heavy => sub { $_[0] =~ /runner/ }, limit => 3)
#
# Core Perl only (Test::Harness 3.x).
use strict;
use warnings;
use parent 'TAP::Parser::Scheduler';

sub new {
    my ($class, %args) = @_;
    my $heavy = delete $args{heavy} // sub { 0 };
    my $limit = delete $args{limit} // 0;
    my $self = $class->SUPER::new(%args);
    $self->{smcp} = { heavy => $heavy, limit => $limit, running => 0 };
    return $self;
}

# how many held files run now
sub running { return $_[0]{smcp}{running} }

sub _held {
    my ($self, $job) = @_;
    my $s = $self->{smcp};
    return $s->{limit} > 0 && $s->{running} >= $s->{limit}
           && $s->{heavy}->($job->filename);
}

# the base class's walk of the schedule (a list of sequences, each a list
# of files and nested lists), but a sequence whose next file is held is
# passed over
sub _find_next_job {
    my ($self, $rule) = @_;
    my @queue;
    my $index = 0;
    while ($index < @$rule) {
        my $seq = $rule->[$index];
        shift @$seq while @$seq && TAP::Parser::Scheduler::_is_empty($seq->[0]);
        if (!@$seq) {
            splice @$rule, $index, 1;
            next;
        }
        my $head = $seq->[0];
        if (defined $head && ref $head eq 'ARRAY') {
            push @queue, $seq;
        } elsif (defined $head && !$self->_held($head)) {
            my $job = splice @$seq, 0, 1, undef;
            my $heavy = $self->{smcp}{heavy}->($job->filename);
            $self->{smcp}{running}++ if $heavy;
            $job->on_finish(sub {
                $self->{smcp}{running}-- if $heavy;
                shift @$seq;
            });
            return $job;
        }
        ++$index;
    }
    for my $seq (@queue) {
        if (my @jobs = $self->_find_next_job($seq->[0])) {
            return @jobs;
        }
    }
    return;
}

1;
