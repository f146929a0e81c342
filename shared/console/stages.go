package console

import "github.com/gigafactory/fleet/shared/fleet"

// StagesFile is the stage machine as the console reads it, served below
// Prefix beside the page: the page lists no stage or action of its own, so
// one added to package fleet shows in the console unchanged.
const StagesFile = "stages.json"

// machine is StagesFile's document.
type machine struct {
	// Stages in lifecycle order: the jobs list's tabs.
	Stages []fleet.Stage `json:"stages"`
	// Terminal are the stages nothing leaves without an operator.
	Terminal []fleet.Stage `json:"terminal"`
	// Actions in the order the job page offers them.
	Actions []machineAction `json:"actions"`
}

// machineAction is an operator action and the stages it applies in.
type machineAction struct {
	Name string        `json:"name"`
	From []fleet.Stage `json:"from"`
}

// stageMachine builds the document from a stage machine: package fleet's in
// production, another in the test that proves a new stage or action reaches
// the console.
func stageMachine(stages []fleet.Stage, rules []fleet.Rule, actions []fleet.OperatorAction) machine {
	m := machine{Stages: stages, Terminal: []fleet.Stage{}, Actions: []machineAction{}}
	for _, s := range stages {
		if s.Terminal() {
			m.Terminal = append(m.Terminal, s)
		}
	}
	for _, a := range actions {
		m.Actions = append(m.Actions, machineAction{Name: a.Name, From: a.From(stages, rules)})
	}
	return m
}
