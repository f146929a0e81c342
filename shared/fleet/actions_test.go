package fleet_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// The stages each operator action applies in, read from the stage machine:
// what the console offered when it listed them by hand.
func TestOperatorActionsFromTheStageMachine(t *testing.T) {
	t.Parallel()
	want := map[string][]fleet.Stage{
		"ship":    {fleet.StageReview, fleet.StageTesting},
		"reject":  {fleet.StageReview, fleet.StageTesting},
		"requeue": {fleet.StageFailed, fleet.StageDeadLetter, fleet.StageCancelled},
		// Leased jobs are cancelled by their holder at the operator's request.
		"cancel": {fleet.StageQueued, fleet.StageBlocked, fleet.StageAssigned, fleet.StageBuilding, fleet.StageReview, fleet.StageTesting},
	}
	names := []string{}
	for _, a := range fleet.OperatorActions {
		names = append(names, a.Name)
		require.Equal(t, want[a.Name], a.From(fleet.Stages, fleet.Transitions), a.Name)
	}
	require.Equal(t, []string{"ship", "reject", "requeue", "cancel"}, names)
}

func TestOperatorActionFrom(t *testing.T) {
	t.Parallel()
	const linting fleet.Stage = "linting"
	stages := []fleet.Stage{fleet.StageQueued, fleet.StageBuilding, linting, fleet.StageShipped, fleet.StageCancelled}
	rules := []fleet.Rule{
		{From: fleet.StageBuilding, To: linting, Actor: fleet.ActorFactory, Lease: fleet.LeaseRelease},
		{From: linting, To: fleet.StageShipped, Actor: fleet.ActorOperator},
		{From: fleet.StageQueued, To: fleet.StageShipped, Actor: fleet.ActorSystem},
		{From: fleet.StageQueued, To: fleet.StageCancelled, Actor: fleet.ActorOperator},
		{From: fleet.StageBuilding, To: fleet.StageCancelled, Actor: fleet.ActorFactory, Lease: fleet.LeaseRelease},
		{From: fleet.StageBuilding, To: fleet.StageShipped, Actor: fleet.ActorFactory, Lease: fleet.LeaseRelease},
	}
	tests := []struct {
		name   string
		action fleet.OperatorAction
		want   []fleet.Stage
	}{
		{"operator moves only", fleet.OperatorAction{Name: "ship", To: fleet.StageShipped}, []fleet.Stage{linting}},
		{"holder's release counts when the action is a request", fleet.OperatorAction{Name: "cancel", To: fleet.StageCancelled, ByHolder: true},
			[]fleet.Stage{fleet.StageQueued, fleet.StageBuilding}},
		{"holder's release does not count otherwise", fleet.OperatorAction{Name: "stop", To: fleet.StageCancelled}, []fleet.Stage{fleet.StageQueued}},
		{"no rule: nowhere", fleet.OperatorAction{Name: "park", To: fleet.StageQueued}, []fleet.Stage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.action.From(stages, rules))
		})
	}
}
