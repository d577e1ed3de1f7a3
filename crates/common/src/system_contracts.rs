//! The system contracts a post-Prague chain needs at genesis: their runtime code as the
//! EIPs specify it, deployed at the addresses the EIPs name.

/// EIP-4788 beacon roots.
pub const BEACON_ROOTS_ADDRESS: &str = "0x000f3df6d732807ef1319fb7b8bb8522d0beac02";
/// Runtime code of the EIP-4788 beacon roots contract.
pub const BEACON_ROOTS_CODE: &str = concat!(
    "0x3373fffffffffffffffffffffffffffffffffffffffe14604d57602036146024575f5ffd5b5f358015604957",
    "62001fff810690815414603c575f5ffd5b62001fff01545f5260205ff35b5f5ffd5b62001fff42064281555f35",
    "9062001fff015500",
);

/// EIP-2935 block hash history.
pub const HISTORY_STORAGE_ADDRESS: &str = "0x0000f90827f1c53a10cb7a02335b175320002935";
/// Runtime code of the EIP-2935 block hash history contract.
pub const HISTORY_STORAGE_CODE: &str = concat!(
    "0x3373fffffffffffffffffffffffffffffffffffffffe14604657602036036042575f35600143038111604257",
    "611fff81430311604257611fff9006545f5260205ff35b5f5ffd5b5f35611fff60014303065500",
);

/// EIP-7002 withdrawal requests.
pub const WITHDRAWAL_REQUESTS_ADDRESS: &str = "0x00000961ef480eb55e80d19ad83579a64c007002";
/// Runtime code of the EIP-7002 withdrawal requests contract.
pub const WITHDRAWAL_REQUESTS_CODE: &str = concat!(
    "0x3373fffffffffffffffffffffffffffffffffffffffe1460cb5760115f54807fffffffffffffffffffffffff",
    "ffffffffffffffffffffffffffffffffffffffff146101f457600182026001905f5b5f82111560685781019083",
    "028483029004916001019190604d565b909390049250505036603814608857366101f457346101f4575f526020",
    "5ff35b34106101f457600154600101600155600354806003026004013381556001015f35815560010160203590",
    "553360601b5f5260385f601437604c5fa0600101600355005b6003546002548082038060101160df575060105b",
    "5f5b8181146101835782810160030260040181604c02815460601b815260140181600101548152602001906002",
    "0154807fffffffffffffffffffffffffffffffff00000000000000000000000000000000168252906010019060",
    "401c908160381c81600701538160301c81600601538160281c81600501538160201c81600401538160181c8160",
    "0301538160101c81600201538160081c81600101535360010160e1565b910180921461019557906002556101a0",
    "565b90505f6002555f6003555b5f54807fffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "ffffffff14156101cd57505f5b6001546002828201116101e25750505f6101e8565b01600290035b5f555f6001",
    "55604c025ff35b5f5ffd",
);

/// EIP-7251 consolidation requests.
pub const CONSOLIDATION_REQUESTS_ADDRESS: &str = "0x0000bbddc7ce488642fb579f8b00f3a590007251";
/// Runtime code of the EIP-7251 consolidation requests contract.
pub const CONSOLIDATION_REQUESTS_CODE: &str = concat!(
    "0x3373fffffffffffffffffffffffffffffffffffffffe1460d35760115f54807fffffffffffffffffffffffff",
    "ffffffffffffffffffffffffffffffffffffffff1461019a57600182026001905f5b5f82111560685781019083",
    "028483029004916001019190604d565b9093900492505050366060146088573661019a573461019a575f526020",
    "5ff35b341061019a57600154600101600155600354806004026004013381556001015f35815560010160203581",
    "5560010160403590553360601b5f5260605f60143760745fa0600101600355005b600354600254808203806002",
    "1160e7575060025b5f5b8181146101295782810160040260040181607402815460601b81526014018160010154",
    "8152602001816002015481526020019060030154905260010160e9565b910180921461013b5790600255610146",
    "565b90505f6002555f6003555b5f54807fffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "ffffffff141561017357505f5b6001546001828201116101885750505f61018e565b01600190035b5f555f6001",
    "556074025ff35b5f5ffd",
);

/// Every system contract: (address, runtime code), in the order above.
pub const ALL: [(&str, &str); 4] = [
    (BEACON_ROOTS_ADDRESS, BEACON_ROOTS_CODE),
    (HISTORY_STORAGE_ADDRESS, HISTORY_STORAGE_CODE),
    (WITHDRAWAL_REQUESTS_ADDRESS, WITHDRAWAL_REQUESTS_CODE),
    (CONSOLIDATION_REQUESTS_ADDRESS, CONSOLIDATION_REQUESTS_CODE),
];

/// Every system contract as a genesis account (balance 1, nonce 1, its code), as the dev
/// chain, the generated chains and the tools' genesis files deploy them.
pub fn genesis_accounts()
-> impl Iterator<Item = (alloy_primitives::Address, crate::config::GenesisAccount)> {
    ALL.iter().map(|(address, code)| {
        (
            address
                .parse()
                .expect("system contract addresses are valid"),
            crate::config::GenesisAccount {
                balance: alloy_primitives::U256::from(1),
                nonce: 1,
                code: code.parse().expect("system contract code is valid hex"),
                ..Default::default()
            },
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_system_contract_is_a_genesis_account_with_code() {
        let accounts: Vec<_> = super::genesis_accounts().collect();
        assert_eq!(accounts.len(), super::ALL.len());
        for (address, account) in accounts {
            assert!(!account.code.is_empty(), "{address}");
            assert_eq!(account.nonce, 1);
        }
    }
}
