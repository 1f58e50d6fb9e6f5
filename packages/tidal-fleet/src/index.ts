// The public surface of tidal-fleet: limits shared by every replica of a deployment.
export {};
