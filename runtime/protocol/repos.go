package protocol

// Snapshot sources (PROTOCOL.md, "Snapshot sources"): repositories whose
// current state the upstream serves whole, with a version that grows on
// every change.

// PathRepos is GET {upstream}/v1/repos (the list) and
// GET {upstream}/v1/repos/{repo} (one repository's current state).
const PathRepos = "/v1/repos"

// RepoList is the answer of GET /v1/repos.
type RepoList struct {
	Repos []string `json:"repos"`
}

// RepoItem is one file of a repository: its path and content version.
type RepoItem struct {
	ID      string `json:"id"`
	Version string `json:"version"`
}

// RepoState is a repository's whole current state.
type RepoState struct {
	Repo    string     `json:"repo"`
	Version int64      `json:"version"`
	Apps    []string   `json:"apps"`
	Items   []RepoItem `json:"items"`
}

// RepoChange is the body of a snapshot webhook: one change that takes an
// app from the state it was last delivered toward the repository's
// current state (engine.Change's JSON).
type RepoChange struct {
	Source  string `json:"source"`
	Op      string `json:"op"`
	ID      string `json:"id"`
	Version string `json:"version,omitempty"`
}
