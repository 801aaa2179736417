package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A bucket's stream lives in one cluster of a supercluster: the one its
// placement names, or else the cluster of the client that created it. That
// cluster is the election's home region: candidates elsewhere lead only while
// they reach it (docs/topologies.md, "Where to put the bucket"). The helpers
// here take the placement from bucket create's flags and say where a bucket
// lives.

// placementFlags are bucket create's --cluster and --tags, named as the
// nats CLI names them.
type placementFlags struct {
	cluster string
	tags    string
}

func (p *placementFlags) add(fs *flagSet) {
	fs.StringVar(&p.cluster, "cluster", "",
		"place the bucket in the cluster `NAME` (its home region); default the cluster of the server this client connects to")
	fs.StringVar(&p.tags, "tags", "",
		"place the bucket on servers with all of these server `TAGS`, comma separated, such as az:1,ssd")
}

// placement returns the placement the flags ask for, nil if none, or a usage
// error naming the flag and what it allows.
func (p *placementFlags) placement(given map[string]bool) (*jetstream.Placement, error) {
	if !given["cluster"] && !given["tags"] {
		return nil, nil
	}
	placement := &jetstream.Placement{}
	if given["cluster"] {
		if p.cluster == "" || strings.ContainsAny(p.cluster, "*> \t\r\n") {
			return nil, usageErr{fmt.Errorf("--cluster %q: want a cluster's name as its servers' cluster { name } gives it, without spaces or wildcards (* >)", p.cluster)}
		}
		placement.Cluster = p.cluster
	}
	if given["tags"] {
		for _, tag := range strings.Split(p.tags, ",") {
			if tag = strings.TrimSpace(tag); tag == "" || strings.ContainsAny(tag, " \t\r\n") {
				return nil, usageErr{fmt.Errorf("--tags %q: an empty tag or one with spaces; want server tags separated by commas, such as az:1,ssd", p.tags)}
			}
			if !slices.Contains(placement.Tags, tag) {
				placement.Tags = append(placement.Tags, tag)
			}
		}
	}
	return placement, nil
}

// describePlacement says what a placement asks for, such as `cluster "C1"
// on servers tagged az:1, ssd`.
func describePlacement(p *jetstream.Placement) string {
	var parts []string
	if p.Cluster != "" {
		parts = append(parts, fmt.Sprintf("cluster %q", p.Cluster))
	}
	if len(p.Tags) > 0 {
		parts = append(parts, "servers tagged "+strings.Join(p.Tags, ", "))
	}
	if len(parts) == 0 {
		return "the default placement"
	}
	return strings.Join(parts, " on ")
}

// placementDiffers says how an existing bucket's placement differs from the
// one asked for with --cluster and --tags, one item per flag, for
// sameAsAsked. The cluster compared is the one the stream lives in, when the
// server says, so that a bucket created from that cluster's servers without a
// placement counts as placed there.
func placementDiffers(info *jetstream.StreamInfo, asked *jetstream.Placement, given map[string]bool) []string {
	if asked == nil || info == nil {
		return nil
	}
	var had jetstream.Placement
	if info.Config.Placement != nil {
		had = *info.Config.Placement
	}
	lives := had.Cluster
	if c := streamCluster(info); c != "" {
		lives = c
	}
	var differ []string
	if given["cluster"] && lives != asked.Cluster {
		where := "no cluster"
		if lives != "" {
			where = "cluster " + lives
		}
		differ = append(differ, fmt.Sprintf("%s, not --cluster %s", where, asked.Cluster))
	}
	if given["tags"] && !sameTags(had.Tags, asked.Tags) {
		tags := "no placement tags"
		if len(had.Tags) > 0 {
			tags = "placement tags " + strings.Join(had.Tags, ",")
		}
		differ = append(differ, fmt.Sprintf("%s, not --tags %s", tags, strings.Join(asked.Tags, ",")))
	}
	return differ
}

// sameTags reports whether a and b hold the same tags, in any order; the
// server matches tags without regard to case.
func sameTags(a, b []string) bool {
	norm := func(tags []string) []string {
		out := make([]string, len(tags))
		for i, t := range tags {
			out[i] = strings.ToLower(t)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(norm(a), norm(b))
}

// site is where this client reaches the bucket from: the JetStream domain
// its requests go to ("" for the connected server's own) and the cluster of
// the server it is connected to ("" when that server is in none).
type site struct {
	domain, cluster string
}

// siteOf returns where the client of nc and js reaches buckets from.
func siteOf(nc *nats.Conn, js jetstream.JetStream) site {
	return site{domain: js.Options().Domain, cluster: nc.ConnectedClusterName()}
}

// location says where the bucket of info lives, as lines starting with
// "location:": its cluster, stream leader and followers; the JetStream domain
// it was reached through; and, when the client is connected to another
// cluster, that candidates there lead only while the bucket's cluster is
// reachable. It says nothing of a bucket on a server in no cluster reached
// in its own domain: there is nothing to tell.
func location(info *jetstream.StreamInfo, from site) []string {
	var lines []string
	if c := info.Cluster; c != nil && c.Name != "" {
		line := fmt.Sprintf("location: cluster %s, stream leader %s", c.Name, orNone(c.Leader))
		if len(c.Replicas) == 0 {
			line += ", no other replicas"
		}
		for i, r := range c.Replicas {
			state := "current"
			switch {
			case r.Offline:
				state = "offline"
			case !r.Current:
				state = "catching up"
			}
			sep := ", "
			if i == 0 {
				sep = ", replicas "
			}
			line += fmt.Sprintf("%s%s (%s)", sep, r.Name, state)
		}
		if p := info.Config.Placement; p != nil && (p.Cluster != "" || len(p.Tags) > 0) {
			line += "; placed by " + describePlacement(p)
		}
		lines = append(lines, line)
	} else if p := info.Config.Placement; p != nil && (p.Cluster != "" || len(p.Tags) > 0) {
		// A server that runs JetStream outside a cluster takes a
		// placement and ignores it.
		lines = append(lines, fmt.Sprintf("location: a server in no cluster, which ignores the placement asked (%s)", describePlacement(p)))
	}
	if from.domain != "" {
		lines = append(lines, fmt.Sprintf("location: JetStream domain %s: candidates that reach the bucket through this domain lead only while it is reachable from their server", from.domain))
	}
	if c := streamCluster(info); c != "" && from.cluster != "" && from.cluster != c {
		lines = append(lines, fmt.Sprintf("location: this client is connected to cluster %s: candidates connected to cluster %s lead only while cluster %s is reachable",
			from.cluster, from.cluster, c))
	}
	return lines
}

// orNone is s, or "none" for an empty s.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
