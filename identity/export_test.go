package identity

// IsDNS1123Subdomain exports isDNS1123Subdomain to the tests.
var IsDNS1123Subdomain = isDNS1123Subdomain
