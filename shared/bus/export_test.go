package bus

// MaxDrainPerSub is maxDrainPerSub, for the tests of package bus_test.
const MaxDrainPerSub = maxDrainPerSub
