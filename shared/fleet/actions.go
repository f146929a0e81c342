package fleet

// OperatorAction is an action an operator takes on a job (POST
// /fleet/jobs/{id}/actions). Where it applies is not listed here but read
// from the stage machine (From), so a stage or rule added to Transitions
// reaches every reader of the actions, the console included.
type OperatorAction struct {
	Name string
	// To is the stage the action moves a job to (a requeued job whose
	// dependencies have not shipped waits in blocked instead; it leaves
	// the same stages).
	To Stage
	// ByHolder: on a leased job the action is a request that the holder
	// carries out (an operator's cancel, acknowledged by the factory's
	// release), so it applies where the holder may make the move too.
	ByHolder bool
}

// OperatorActions are the operator's actions, in the order a console
// offers them.
var OperatorActions = []OperatorAction{
	{Name: "ship", To: StageShipped},
	{Name: "reject", To: StageFailed},
	{Name: "requeue", To: StageQueued},
	{Name: "cancel", To: StageCancelled, ByHolder: true},
}

// From lists the stages, in the order of stages, in which rules let the
// action be taken: the operator moves the job to To, or (ByHolder) the
// holder of the job's lease does, giving the lease up.
func (a OperatorAction) From(stages []Stage, rules []Rule) []Stage {
	ok := map[Stage]bool{}
	for _, r := range rules {
		if r.To == a.To && (r.Actor == ActorOperator || a.ByHolder && r.Actor == ActorFactory && r.Lease == LeaseRelease) {
			ok[r.From] = true
		}
	}
	from := []Stage{}
	for _, s := range stages {
		if ok[s] {
			from = append(from, s)
		}
	}
	return from
}
