package nodeagent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Host state: the agent's record, on the host, of what it owns there,
// with a schema version. A new agent process (a DaemonSet rolling
// update, a crash and restart, a rollback) reads it before it touches
// anything, and adopts what the old one left: it compares and changes
// only what differs from its model, so pods never lose their network
// while the agent restarts or changes version.
//
// Schemas:
//
//  1. Agents before the state file: nothing on disk; they own the routes
//     of RouteProtocol in the main table, the nftables table inet
//     SNATTable and CNIConfName in the CNI config directory. An agent
//     that finds no file migrates from schema 1: those are the names it
//     uses too, so it adopts them as they are and writes the file.
//  2. This file (StateSchema), JSON: what the agent owns by name, the
//     version that wrote it and a fingerprint of the model it applied.
//
// A file of a later schema was written by a newer agent (a rollback
// runs this one on its host): this agent cannot know what that one owns
// or how, so it changes nothing on the node (no route, table, CNI config
// or state write) and reports it (stage "state"), until the file is of a
// schema it knows again (roll forward, or remove the file to take over).
// Whatever the schema, every file keeps a top-level "schema" number, so
// any version can tell a newer file from a broken one. A file that is
// not JSON with a schema was not written by an agent (writes are atomic:
// a temporary file and a rename): it is reported and replaced.

// StateSchema is the schema of the host state this agent writes.
const StateSchema = 2

// DefaultStateFile is where the agent keeps its host state: next to the
// catalog file, on a hostPath that outlives the pod.
const DefaultStateFile = "/var/lib/bridgehead/node-state.json"

// HostState is the state file's content.
type HostState struct {
	Schema int `json:"schema"`
	// Agent is the version of the agent that wrote the file.
	Agent string `json:"agent"`
	Node  string `json:"node"`
	Owned Owned  `json:"owned"`
	// Model is a fingerprint of the last model applied in full.
	Model string `json:"model"`
}

// Owned names what the agent owns on the host.
type Owned struct {
	// RouteProtocol tags the agent's routes (main table).
	RouteProtocol int `json:"routeProtocol"`
	// NFTables are "family name" of the nftables tables it writes.
	NFTables []string `json:"nftTables"`
	// CNIConfig is the path of its CNI config.
	CNIConfig string `json:"cniConfig"`
}

// errNewerState marks a state file of a schema this agent does not know.
var errNewerState = errors.New("node state written by a newer agent")

// ParseState parses a state file. A file without a positive schema is
// an error; one of a later schema than StateSchema returns only its
// schema and agent (its other fields may mean something else) and an
// error wrapping errNewerState; an earlier one is migrated.
func ParseState(data []byte) (HostState, error) {
	var head struct {
		Schema *int   `json:"schema"`
		Agent  string `json:"agent"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return HostState{}, fmt.Errorf("not an agent's state: %w", err)
	}
	if head.Schema == nil || *head.Schema < 1 {
		return HostState{}, errors.New("not an agent's state: no schema")
	}
	if *head.Schema > StateSchema {
		return HostState{Schema: *head.Schema, Agent: head.Agent},
			fmt.Errorf("%w (schema %d, agent %q; this agent knows schema %d)", errNewerState, *head.Schema, head.Agent, StateSchema)
	}
	var st HostState
	if err := json.Unmarshal(data, &st); err != nil {
		return HostState{}, fmt.Errorf("schema %d: %w", *head.Schema, err)
	}
	return st, nil
}

// schema1 is what an agent before the state file left on a host: the
// names this agent uses.
func schema1(confDir string) HostState {
	return HostState{Schema: 1, Owned: ownedBy(confDir)}
}

// ownedBy is what this agent owns with CNI config directory confDir.
func ownedBy(confDir string) Owned {
	return Owned{RouteProtocol: int(RouteProtocol), NFTables: []string{"inet " + SNATTable},
		CNIConfig: filepath.Join(confDir, CNIConfName)}
}

// readState reads the state file at path: schema 1 when there is none.
func readState(path, confDir string) (HostState, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return schema1(confDir), nil
	}
	if err != nil {
		return HostState{}, err
	}
	return ParseState(data)
}

// writeState writes st to path atomically; it reports false, and writes
// nothing, when the file already holds it.
func writeState(path string, st HostState) (bool, error) {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return false, err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o644)
}

// modelFingerprint identifies a model for the state file.
func modelFingerprint(d *Desired) string {
	b, _ := json.Marshal(d)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
