#!/usr/bin/perl
# relay.pl PORT COMMAND...: give the kernel's 9p trans=fd a socket whose
# other end is the virtio-serial port PORT. The kernel cannot use the port
# itself ("kernel write not supported for file /vport0p1"), so a child
# process copies bytes both ways between the port and one end of a
# socketpair; the other end stays open, close-on-exec cleared, in this
# process, which then execs COMMAND with every "@FD@" replaced by its
# number, e.g.
#   relay.pl /dev/vport1p1 mount -t 9p -o trans=fd,rfdno=@FD@,wfdno=@FD@ none /mnt/9p
# The child keeps relaying after mount has exited (the kernel holds the
# socket) until either side closes.
use strict;
use warnings;
use Socket;
use Fcntl;
use POSIX ();

# With --trace-setattr FILE, the first 200 Tsetattr requests the kernel
# sends are decoded into FILE (what the client asked for, before the
# server saw it).
my $trace;
if (@ARGV && $ARGV[0] eq '--trace-setattr') { shift @ARGV; $trace = shift @ARGV }
my ($port, @cmd) = @ARGV;
die "usage: relay.pl [--trace-setattr FILE] PORT COMMAND...\n" unless defined $port && @cmd;

socketpair(my $mine, my $theirs, AF_UNIX, SOCK_STREAM, PF_UNSPEC) or die "socketpair: $!\n";
# Open the port before forking so a failure is seen by the caller.
sysopen(my $p, $port, O_RDWR) or die "open $port: $!\n";

my $pid = fork() // die "fork: $!\n";
if ($pid == 0) {
    close $mine;
    POSIX::setsid();
    $0 = "walkfs-9p-relay $port";
    relay($p, $theirs);
    POSIX::_exit(0);
}
close $theirs;
close $p;
my $flags = fcntl($mine, F_GETFD, 0) or die "F_GETFD: $!\n";
fcntl($mine, F_SETFD, $flags & ~FD_CLOEXEC) or die "F_SETFD: $!\n";
my $n = fileno($mine);
s/\@FD\@/$n/g for @cmd;
exec { $cmd[0] } @cmd or die "exec $cmd[0]: $!\n";

sub put {
    my ($fh, $buf) = @_;
    my $off = 0;
    while ($off < length $buf) {
        my $w = syswrite($fh, $buf, length($buf) - $off, $off);
        if (!defined $w) {
            next if $!{EINTR} || $!{EAGAIN};
            return 0;
        }
        $off += $w;
    }
    return 1;
}

sub relay {
    my ($port, $sock) = @_;
    my ($rin, $buf) = ('', '');
    vec($rin, fileno($port), 1) = 1;
    vec($rin, fileno($sock), 1) = 1;
    my $idle_eof = 0;
    while (1) {
        my $n = select(my $rout = $rin, undef, undef, undef);
        if ($n < 0) { next if $!{EINTR}; return }
        if (vec($rout, fileno($sock), 1)) {
            my $r = sysread($sock, $buf, 1 << 20);
            if (!defined $r) { next if $!{EINTR} || $!{EAGAIN}; return }
            return if $r == 0;    # the kernel closed its end: unmounted
            watch($buf) if defined $trace;
            put($port, $buf) or return;
        }
        if (vec($rout, fileno($port), 1)) {
            my $r = sysread($port, $buf, 1 << 20);
            if (!defined $r) { next if $!{EINTR} || $!{EAGAIN}; return }
            if ($r == 0) {
                # virtio_console reads 0 while the host side is not
                # connected; give it a while before calling it the end.
                return if ++$idle_eof > 100;
                select(undef, undef, undef, 0.1);
                next;
            }
            $idle_eof = 0;
            put($sock, $buf) or return;
        }
    }
}

# Decode the kernel's requests just enough to log Tsetattr (type 26):
# size[4] type[1] tag[2] fid[4] valid[4] mode[4] uid[4] gid[4] size[8]
# atime_sec[8] atime_nsec[8] mtime_sec[8] mtime_nsec[8].
my ($pending, $logged, $tfh) = ('', 0);
sub watch {
    $pending .= $_[0];
    while (length($pending) >= 7) {
        my ($size, $type) = unpack('V C', $pending);
        if ($size < 7) { undef $trace; $pending = ''; return }    # not 9P: stop decoding
        last if length($pending) < $size;
        if ($type == 26 && $size >= 67) {
            my ($fid, $valid, $mode, $uid, $gid, $sz, $as, $an, $ms, $mn) =
                unpack('x7 V V V V V Q< Q< Q< Q< Q<', $pending);
            $tfh //= do { open(my $f, '>>', $trace) or undef $trace; $f };
            if ($tfh) {
                printf $tfh "fid=%d valid=0x%x mode=%o uid=%d gid=%d size=%d atime=%d.%09d mtime=%d.%09d\n",
                    $fid, $valid, $mode, $uid, $gid, $sz, $as, $an, $ms, $mn;
                $tfh->flush;
            }
            if (++$logged >= 200) { undef $trace; $pending = ''; return }
        }
        substr($pending, 0, $size, '');
    }
}
