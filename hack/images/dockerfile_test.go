package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
}

// stage is one build stage: its FROM arguments and instructions.
type stage struct {
	from string
	ins  []instruction
}

// parseDockerfile splits a Dockerfile into stages (comments dropped, continuations joined).
func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stages = append(stages, stage{from: args})
			return
		}
		if len(stages) == 0 {
			t.Fatalf("%s: %s before the first FROM", path, cmd)
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, instruction{cmd, strings.TrimSpace(args)})
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		flush()
	}
	flush()
	return stages
}

func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

func (s stage) runs() string { return strings.Join(s.all("RUN"), "\n") }

// named returns the stage FROM ... AS name.
func named(t *testing.T, stages []stage, name string) stage {
	t.Helper()
	for _, s := range stages {
		if strings.HasSuffix(s.from, " AS "+name) {
			return s
		}
	}
	t.Fatalf("no stage %q", name)
	return stage{}
}

// shellVar reads NAME=value from a hack/ script.
func shellVar(t *testing.T, file, name string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `=([^\s$]+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no %s=", file, name)
	}
	return string(m[1])
}

// printfArg is how a Dockerfile's shell printf spells s.
func printfArg(s string) string { return "printf '" + strings.ReplaceAll(s, "\n", `\n`) + "'" }

// TestDockerfilesMatchSpecs: each release image's Dockerfile (build/<name>/Dockerfile, for
// teams that build with Docker) builds what hack/images builds without Docker: the same Go
// package with the same flags, the same root file system (passwd, group, /tmp, CA bundle),
// gcsfuse at the version and toolchain hack/lib.sh pins with the flags hack/install-deps.sh
// uses, and the same user, entrypoint and environment; and no Dockerfile is left without an
// image. A change to either side that the other does not follow fails here.
func TestDockerfilesMatchSpecs(t *testing.T) {
	root := repoRoot(t)
	gcsfuseVersion := shellVar(t, filepath.Join(root, "hack/lib.sh"), "GCSFUSE_VERSION")
	gcsfuseToolchain := shellVar(t, filepath.Join(root, "hack/lib.sh"), "GCSFUSE_TOOLCHAIN")
	deps, err := os.ReadFile(filepath.Join(root, "hack/install-deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	gcsfuseLdflags := regexp.MustCompile(`-ldflags "[^"]*gcsfuseVersion=[^"]*"`).Find(deps)
	if gcsfuseLdflags == nil {
		t.Fatal("hack/install-deps.sh: no gcsfuse -ldflags")
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	if goVersion == nil {
		t.Fatal("go.mod: no go directive")
	}
	golang := "--platform=$BUILDPLATFORM golang:" + string(goVersion[1])

	files, err := filepath.Glob(filepath.Join(root, "build/*/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var release []string
	for _, s := range images {
		if s.release {
			release = append(release, s.name)
		}
	}
	var found []string
	for _, f := range files {
		found = append(found, filepath.Base(filepath.Dir(f)))
	}
	slices.Sort(release)
	if !slices.Equal(found, release) {
		t.Fatalf("Dockerfiles under build/ for %v; want one per release image %v", found, release)
	}

	for _, s := range images {
		if !s.release {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			stages := parseDockerfile(t, filepath.Join(root, "build", s.name, "Dockerfile"))
			build := named(t, stages, "build")
			if build.from != golang+" AS build" {
				t.Errorf("build stage FROM %s; want %s AS build (go.mod's Go)", build.from, golang)
			}
			f := buildFlags("$VERSION") // -trimpath -ldflags "...", as a shell spells it
			goBuild := "CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build " +
				f[0] + " " + f[1] + ` "` + f[2] + `" -o /out/ ` + s.pkg
			// GOWORK=off before the first RUN, and never set again: the product module alone,
			// not the workspace with the tests' module.
			if envs := build.all("ENV"); !slices.Equal(envs, []string{"GOWORK=off"}) || build.ins[0].cmd == "RUN" ||
				slices.IndexFunc(build.ins, func(in instruction) bool { return in.cmd == "ENV" }) > slices.IndexFunc(build.ins, func(in instruction) bool { return in.cmd == "RUN" }) {
				t.Errorf("build stage: want ENV GOWORK=off, alone, before its first RUN; ENV %v", envs)
			}
			if !slices.Contains(build.all("RUN"), goBuild) {
				t.Errorf("build stage does not run\n  %s\nits RUN lines:\n  %s", goBuild, strings.Join(build.all("RUN"), "\n  "))
			}
			for _, want := range []string{
				printfArg(passwd) + " > /rootfs/etc/passwd",
				printfArg(group) + " > /rootfs/etc/group",
				"cp /etc/ssl/certs/ca-certificates.crt /rootfs/" + caBundlePath,
				"mkdir -p /rootfs/" + filepath.Dir(caBundlePath) + " /rootfs/tmp && chmod 1777 /rootfs/tmp",
			} {
				if !strings.Contains(build.runs(), want) {
					t.Errorf("build stage does not make the shared root: no %q", want)
				}
			}

			final := stages[len(stages)-1]
			if final.from != "scratch" {
				t.Errorf("final stage FROM %s; want scratch", final.from)
			}
			copies := []string{"--from=build /rootfs/ /", "--from=build /out/" + s.bin + " /" + s.bin}
			if s.gcsfuse {
				copies = append(copies, "--from=gcsfuse /gcsfuse /gcsfuse")
				g := named(t, stages, "gcsfuse")
				if g.from != golang+" AS gcsfuse" {
					t.Errorf("gcsfuse stage FROM %s; want %s AS gcsfuse", g.from, golang)
				}
				for _, want := range []string{"GCSFUSE_VERSION=" + gcsfuseVersion, "GCSFUSE_TOOLCHAIN=" + gcsfuseToolchain} {
					if !slices.Contains(g.all("ARG"), want) {
						t.Errorf("gcsfuse stage: no ARG %s (hack/lib.sh pins it); ARGs %v", want, g.all("ARG"))
					}
				}
				for _, want := range []string{
					"CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH GOTOOLCHAIN=$GCSFUSE_TOOLCHAIN go install",
					string(gcsfuseLdflags),
					`"github.com/googlecloudplatform/gcsfuse/v3@v$GCSFUSE_VERSION"`,
				} {
					if !strings.Contains(g.runs(), want) {
						t.Errorf("gcsfuse stage does not build it as hack/install-deps.sh does: no %q in\n  %s", want, g.runs())
					}
				}
			}
			if got := final.all("COPY"); !slices.Equal(got, copies) {
				t.Errorf("final stage copies %q; want %q", got, copies)
			}
			if got := final.all("USER"); !slices.Equal(got, []string{s.user}) {
				t.Errorf("USER %v; want %s", got, s.user)
			}
			if got := final.all("ENV"); !slices.Equal(got, []string{pathEnv}) {
				t.Errorf("ENV %v; want %s", got, pathEnv)
			}
			var ep []string
			if eps := final.all("ENTRYPOINT"); len(eps) != 1 || json.Unmarshal([]byte(eps[0]), &ep) != nil || !slices.Equal(ep, s.entrypoint()) {
				t.Errorf("ENTRYPOINT %v; want %q (exec form)", eps, s.entrypoint())
			}
		})
	}
}

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	return root
}
