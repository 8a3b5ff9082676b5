package market

// AmountDecimals is the precision of what is owed and paid: the ledger's
// micro-units, whatever a currency's price precision (Currency.Max).
// Receipts charge GPU time to the micro-unit, so an acknowledgement must be
// able to name exactly what is owed.
const AmountDecimals = 6

// ParseAmount parses a settlement amount, such as a payment received, as a
// non-negative decimal of at most AmountDecimals decimals in currency.
// Prices use ParseMoney, with the currency's own precision.
func ParseAmount(s, currency string) (Money, error) {
	cur, err := LookupCurrency(currency)
	if err != nil {
		return Money{}, err
	}
	cur.Max = AmountDecimals
	micros, err := parseMicros(s, cur)
	if err != nil {
		return Money{}, err
	}
	return Money{Micros: micros, Currency: cur.Code}, nil
}
