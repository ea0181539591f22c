#!/usr/bin/perl
# The host's report of scripts/guest-share.sh: reads the guest's console
# (@@WALKFS- lines) and the host's own event lists and git checks, prints
# the table, the event lists side by side and pjdfstest's counts (also
# written as markdown to --out), and exits 1 when the walkfs side failed.
#   perl report.pl --console LOG --host DIR --walkfs VERSION --use-walkfs 0|1
#                  --pjd-allowed N --secs N --qemu-rc N --out FILE
use strict;
use warnings;
use Getopt::Long;

my %o = ('use-walkfs' => 1, 'pjd-allowed' => 0, secs => 0, 'qemu-rc' => 0, walkfs => '?');
GetOptions(\%o, 'console=s', 'host=s', 'walkfs=s', 'use-walkfs=i', 'pjd-allowed=i', 'secs=i', 'qemu-rc=i', 'out=s')
    or die "bad arguments\n";

# inotify events compared (with ISDIR): those walkfs replays on a mount
# (README: create, delete, modify, attrib, renames). Shown beside them, not
# compared: CLOSE_WRITE, and DELETE_SELF / MOVE_SELF, which inotifywait -r
# itself reports or drops by a race (it forgets a subdirectory's watch
# when its parent reports the directory gone, before or after the
# directory's own event arrives). The rest is what reading does (OPEN,
# ACCESS, CLOSE_NOWRITE) and IGNORED.
my %compare = map { $_ => 1 } qw(CREATE DELETE MODIFY ATTRIB MOVED_FROM MOVED_TO);
my %shown = (%compare, map { $_ => 1 } qw(CLOSE_WRITE DELETE_SELF MOVE_SELF));
sub norm_inotify {
    my ($set, @l) = @_;
    my @out;
    for my $l (@l) {
        my ($ev, $path) = $l =~ /^(\S+) ?(.*)$/ or next;
        my @e = split /,/, $ev;
        my @k = grep { $set->{$_} } @e;
        next unless @k;
        push @k, 'ISDIR' if grep { $_ eq 'ISDIR' } @e;
        $path = '.' if $path eq '';
        push @out, join(',', @k) . " $path";
    }
    return @out;
}
sub slurp {
    my ($f) = @_;
    open my $h, '<', $f or return ();
    my @l = <$h>;
    chomp @l;
    return @l;
}

# ---------------------------------------------------------------- console
my (%listen, %mount, %ev, %evend, %res, %fsm, %pjd, %pjdskip, @notok, @fatal, @detail, $kernel, $probe, $end, $begin);
for my $l (slurp($o{console})) {
    $l =~ s/\r//g;
    if ($l =~ /^\@\@WALKFS-BEGIN (.*)/) { $begin = $1; ($kernel) = $l =~ /kernel=(\S+)/ }
    elsif ($l =~ /^\@\@WALKFS-PROBE vsock result=(\S+)(.*)/) { $probe = "$1$2" }
    elsif ($l =~ /^\@\@WALKFS-LISTEN (\S+) result=(\S+)(.*)/) { $listen{$1} = "$2$3" }
    elsif ($l =~ /^\@\@WALKFS-MOUNT fs=(\S+) result=(\S+)(.*)/) { $mount{$1} = { ok => $2 eq 'ok', line => "$2$3" } }
    elsif ($l =~ /^\@\@WALKFS-EV fs=(\S+) tool=(\S+) ?(.*)$/) { push @{ $ev{$1}{$2} }, $3 }
    elsif ($l =~ /^\@\@WALKFS-EVENTS-END fs=(\S+) tool=(\S+) lines=(\d+)/) { $evend{$1}{$2} = $3 }
    elsif ($l =~ /^\@\@WALKFS-RESULT fs=(\S+) test=(\S+) result=(\S+) ms=(\d+)/) { $res{$1}{$2} = { r => $3, ms => $4 } }
    elsif ($l =~ /^\@\@WALKFS-FSMONITOR fs=(\S+) with=(\S*) without=(\S*) hook=(.*)$/) { $fsm{$1} = { with => $2, without => $3, hook => $4 } }
    elsif ($l =~ /^\@\@WALKFS-PJD fs=(\S+) folder=(\S+) (.*)/) {
        my ($fs, $folder, %c) = ($1, $2, map { split /=/ } split / /, $3);
        push @{ $pjd{$fs} }, { folder => $folder, %c };
    }
    elsif ($l =~ /^\@\@WALKFS-PJDSKIP fs=(\S+) folder=(\S+)/) { push @{ $pjdskip{$1} }, $2 }
    elsif ($l =~ /^\@\@WALKFS-NOTOK (.*)/) { push @notok, $1 }
    elsif ($l =~ /^\@\@WALKFS-FATAL (.*)/) { push @fatal, $1 }
    elsif ($l =~ /^\@\@WALKFS-DETAIL (.*)/) { push @detail, $1 }
    elsif ($l =~ /^\@\@WALKFS-END/) { $end = 1 }
}

# ------------------------------------------------------------------- rows
my $expected_status = ' M README.md|?? from-host.txt|';
(my $expected_guest = $expected_status) =~ tr/ /_/;    # the console's form
my (@bad, @rows, @md, @notcompared);
my %tag = (walkfs => 'w', virtiofs => 'v');
my %transport = (walkfs => 'vsock (vhost-device-vsock)', virtiofs => 'virtio-fs (virtiofsd)');
my %mnt = (walkfs => 'walkfs mount vsock:2:PORT, cache=coherent,allow_other', virtiofs => 'mount -t virtiofs, cache=auto');
my (%lists);
for my $fs ('walkfs', 'virtiofs') {
    next if $fs eq 'walkfs' && !$o{'use-walkfs'};
    my $t = $tag{$fs};
    my $H = "$o{host}/$t";
    my @hi = norm_inotify(\%compare, slurp("$H-inotify.txt"));
    my @gi = norm_inotify(\%compare, @{ $ev{$fs}{inotify} || [] });
    my @his = norm_inotify(\%shown, slurp("$H-inotify.txt"));
    my @gis = norm_inotify(\%shown, @{ $ev{$fs}{inotify} || [] });
    for my $e (qw(CLOSE_WRITE DELETE_SELF MOVE_SELF)) {
        my ($h, $g) = (scalar(grep { /^\Q$e\E[ ,]/ } @his), scalar(grep { /^\Q$e\E[ ,]/ } @gis));
        push @notcompared, "$fs: $e host $h, guest $g" if $h || $g;
    }
    my @hn = slurp("$H-node.txt");
    my @gn = @{ $ev{$fs}{node} || [] };
    $lists{$fs} = { hi => \@his, gi => \@gis, hn => \@hn, gn => \@gn };
    my $mounted = $mount{$fs} && $mount{$fs}{ok};
    my $seen = defined $evend{$fs}{inotify};
    my $ieq = $seen && @hi && join("\n", @hi) eq join("\n", @gi);
    my $neq = $seen && @hn && join("\n", @hn) eq join("\n", @gn);
    my $node = !$seen ? 'not run' : $neq ? sprintf('equal (%d)', scalar @gn) : sprintf('%d of %d', scalar @gn, scalar @hn);

    # git: the guest's run, and the host's reading of the repository.
    my %g = map { /^(\w+)=(.*)$/ ? ($1, $2) : () } slurp("$o{host}/git-$t.txt");
    my $edited = grep { /repo-$t: / } slurp("$H-edits.txt");
    my $want_log = "guest commit 2 on $fs|guest commit 1 on $fs|";
    my @gitbad;
    push @gitbad, 'guest: ' . ($res{$fs}{git} ? $res{$fs}{git}{r} : 'not run') unless $res{$fs}{git} && $res{$fs}{git}{r} eq 'ok';
    push @gitbad, "host log '" . ($g{log} // '') . "'" unless ($g{log} // '') eq $want_log;
    push @gitbad, 'host fsck ' . ($g{fsck} // 'not run') unless ($g{fsck} // '') eq 'ok';
    push @gitbad, "host status '" . ($g{status} // '') . "'" unless ($g{status} // 'x') eq ($edited ? $expected_status : '');
    my $git = @gitbad ? 'FAIL: ' . join('; ', @gitbad) : sprintf('ok (%.1f s; host: log, fsck, status)', $res{$fs}{git}{ms} / 1000);

    # fsmonitor: git status with the hook equals git status without it,
    # which shows the host's two edits.
    my $f = $fsm{$fs};
    my $fsmon;
    if (!$f) { $fsmon = 'not run' }
    else {
        my $hook = $f->{hook} eq 'none' ? 'the hook listed nothing' : "the hook listed $f->{hook}";
        my $with = $f->{with} eq 'clean' ? '' : $f->{with};
        my $without = $f->{without} eq 'clean' ? '' : $f->{without};
        $fsmon = ($with eq $without && $without eq $expected_guest) ? "ok ($hook)"
            : "DIFFERS: with the hook '$with', without '$without' ($hook)";
    }

    # pjdfstest
    my $p = $pjd{$fs};
    my $pj = 'skipped';
    my ($pfail, $passert, $pmiss) = (0, 0, 0);
    if ($p) {
        for my $x (@$p) { $pfail += $x->{failed}; $passert += $x->{assertions}; $pmiss += $x->{missing} }
        $pj = sprintf('%d/%d failed%s', $pfail, $passert, $pmiss ? ", $pmiss missing" : '');
    }
    if ($pjdskip{$fs}) {
        $pj .= ' (not run, time budget: ' . join(' ', @{ $pjdskip{$fs} }) . ')';
    }
    push @rows, [$transport{$fs}, $mnt{$fs}, scalar @hi, $seen ? scalar @gi : '-', $ieq ? 'yes' : 'no', $pj, $git, $fsmon, $node];

    if ($fs eq 'walkfs') {
        push @bad, 'walkfs: not mounted' . ($mount{$fs} ? " ($mount{$fs}{line})" : '') unless $mounted;
        if ($mounted) {
            push @bad, 'walkfs: the inotify events differ from the host\'s' unless $ieq;
            push @bad, 'walkfs: the node fs.watch events differ from the host\'s' unless $neq;
            push @bad, "walkfs: git: $git" if @gitbad;
            push @bad, "walkfs: fsmonitor: $fsmon" unless $fsmon =~ /^ok/;
            push @bad, "walkfs: pjdfstest: $pj (allowed: $o{'pjd-allowed'})" if $p && $pfail + $pmiss > $o{'pjd-allowed'};
        }
    } else {
        push @bad, 'virtiofs: not mounted' unless $mounted;
    }
}
push @bad, 'vsock probe (socat): ' . ($probe // 'not run') unless ($probe // '') =~ /^ok/;
if ($o{'use-walkfs'}) {
    for my $k ('vsock-loopback', 'vsock-any-cid-without-secret') {
        push @bad, "walkfs serve --listen: $k: " . ($listen{$k} // 'not run') unless ($listen{$k} // '') =~ /^ok/;
    }
}
push @bad, "the guest did not finish (qemu exit $o{'qemu-rc'})" unless $end && $o{'qemu-rc'} == 0;
push @bad, "guest: $_" for @fatal;

# ------------------------------------------------------------------ print
sub table {
    my ($head, @r) = @_;
    my @w = map { length } @$head;
    for my $r (@r) { $w[$_] = length $r->[$_] > $w[$_] ? length $r->[$_] : $w[$_] for 0 .. $#$r }
    my @o;
    for my $r ($head, [map { '-' x $_ } @w], @r) {
        push @o, '| ' . join(' | ', map { sprintf "%-*s", $w[$_], $r->[$_] // '' } 0 .. $#w) . ' |';
    }
    return @o;
}
push @md, "guest-share: kernel " . ($kernel // '?') . ", walkfs $o{walkfs}, boot $o{secs} s (qemu exit $o{'qemu-rc'})";
push @md, "vsock probe (socat): " . ($probe // 'not run');
push @md, "walkfs serve --listen in the guest: " . join('; ', map { "$_ $listen{$_}" } sort keys %listen) if %listen;
push @md, "mounts: " . join('; ', map { "$_ " . ($mount{$_} ? $mount{$_}{line} : 'not tried') } sort keys %mount);
push @md, '';
push @md, table(['transport', 'mount', 'host events', 'guest events', 'equal?', 'pjdfstest', 'git', 'fsmonitor', 'node fs.watch'], @rows);
push @md, '';
my @fss = grep { $lists{$_} } 'walkfs', 'virtiofs';
for my $k (['hi', 'gi', 'inotifywait -m -r (CREATE DELETE MODIFY ATTRIB MOVED_FROM MOVED_TO compared; CLOSE_WRITE DELETE_SELF MOVE_SELF shown)'], ['hn', 'gn', 'node fs.watch (DIR TYPE NAME)']) {
    push @md, "$k->[2], host vs guest:";
    my @head = map { ("host ($tag{$_} round)", "guest $_") } @fss;
    my $n = 0;
    for my $fs (@fss) {
        for my $x ($k->[0], $k->[1]) { $n = @{ $lists{$fs}{$x} } if @{ $lists{$fs}{$x} } > $n }
    }
    my @r;
    for my $i (0 .. $n - 1) {
        push @r, [map { my $fs = $_; map { $lists{$fs}{$_}[$i] // '' } $k->[0], $k->[1] } @fss];
    }
    push @md, table(\@head, @r);
    push @md, '';
}
if (@notcompared) {
    push @md, 'inotify events shown, not compared:';
    push @md, map { "  $_" } @notcompared;
    push @md, '';
}
for my $fs (sort keys %pjd) {
    push @md, "pjdfstest on $fs:";
    push @md, table(['folder', 'files', 'files failed', 'assertions', 'failed', 'missing', 'secs'],
        map { [$_->{folder}, $_->{files}, $_->{files_failed}, $_->{assertions}, $_->{failed}, $_->{missing}, $_->{secs}] } @{ $pjd{$fs} });
    push @md, '';
}
if (@notok) {
    push @md, 'pjdfstest failures (first 40 per folder):';
    push @md, map { "  $_" } @notok;
    push @md, '';
}
if (@detail) {
    push @md, 'guest details:';
    push @md, map { "  $_" } @detail;
    push @md, '';
}
if (@bad) {
    push @md, 'FAILED:';
    push @md, map { "  $_" } @bad;
} else {
    push @md, $o{'use-walkfs'} ? 'walkfs side: everything passed.' : 'probe and virtiofs ran (walkfs not run).';
}
print "$_\n" for @md;
if ($o{out}) {
    open my $h, '>', $o{out} or die "$o{out}: $!\n";
    print $h "```\n", map({ "$_\n" } @md), "```\n";
}
exit(@bad ? 1 : 0);
